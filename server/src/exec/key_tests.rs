//! Transition keys: each constructor's text, and every text read back as the same key.

use super::{ListKey, Pause, StepKey, TransitionKey};

fn round_trips(key: TransitionKey, text: &str) {
    assert_eq!(key.to_string(), text);
    assert_eq!(text.parse::<TransitionKey>().as_ref(), Ok(&key), "{text}");
}

#[test]
fn every_kind_of_step_has_the_key_release_0_1_0_stored() {
    let main = ListKey::main();
    let step = |i| main.step(i);
    round_trips(TransitionKey::Init, "init");
    round_trips(TransitionKey::Finish, "finish");
    round_trips(TransitionKey::Error, "error");
    round_trips(TransitionKey::Cancelled, "cancelled");
    round_trips(TransitionKey::Step(step(0)), "main[0]");
    round_trips(TransitionKey::Step(step(12)), "main[12]");
    round_trips(TransitionKey::Step(step(3).foreach(2).step(0)), "main[3].foreach[2][0]");
    round_trips(TransitionKey::Step(step(1).map().step(4)), "main[1].map[4]");
    round_trips(TransitionKey::Step(step(1).parallel().step(2)), "main[1].parallel[2]");
    round_trips(TransitionKey::Step(step(2).then().step(1)), "main[2].then[1]");
    round_trips(TransitionKey::Step(step(2).otherwise().step(0)), "main[2].else[0]");
    round_trips(TransitionKey::Step(step(0).case(3).step(0)), "main[0].switch[3][0]");
    round_trips(TransitionKey::Step(step(1).yielded("double").step(2)), "main[1]>double[2]");
    round_trips(TransitionKey::Wait(step(1).wait(Pause::Input)), "main[1]#wait");
    round_trips(TransitionKey::Resume(step(1).wait(Pause::Input)), "main[1]#wait/resume");
    round_trips(TransitionKey::Wait(step(0).wait(Pause::Call(1))), "main[0]#call1");
    round_trips(TransitionKey::Wait(step(0).wait(Pause::Call(12))), "main[0]#call12");
    round_trips(TransitionKey::Resume(step(0).wait(Pause::Call(2))), "main[0]#call2/resume");
    round_trips(TransitionKey::YieldArgs(step(1)), "main[1]#args");
    round_trips(TransitionKey::YieldInit(step(1)), "main[1]#init");
    round_trips(TransitionKey::YieldFinish(step(1)), "main[1]#fin");
    let deep = step(0).yielded("sub").step(1).foreach(0).step(2).then().step(0).map().step(1);
    round_trips(TransitionKey::Step(deep.clone()), "main[0]>sub[1].foreach[0][2].then[0].map[1]");
    round_trips(
        TransitionKey::Resume(deep.wait(Pause::Call(3))),
        "main[0]>sub[1].foreach[0][2].then[0].map[1]#call3/resume",
    );
}

/// A workflow's name may hold the grammar's own characters: its keys still read back.
#[test]
fn workflow_names_with_any_characters_round_trip() {
    for name in ["a.b", "x>y", "w#wait", "q]r", "s[0]", "t/resume", "é ü", ""] {
        let step = ListKey::main().step(0).yielded(name).step(1);
        let text = format!("main[0]>{name}[1]");
        round_trips(TransitionKey::Step(step.clone()), &text);
        round_trips(TransitionKey::Wait(step.wait(Pause::Input)), &format!("{text}#wait"));
        round_trips(TransitionKey::Resume(step.wait(Pause::Call(1))), &format!("{text}#call1/resume"));
        round_trips(TransitionKey::YieldFinish(step), &format!("{text}#fin"));
    }
}

#[test]
fn texts_outside_the_grammar_are_not_keys() {
    for text in [
        "",
        "main",
        "start",
        "main[x]",
        "main[]",
        "other[0]",
        "main[0]#",
        "main[0]#call",
        "main[0]#call0",
        "main[0]#call01",
        "main[0]#call+1",
        "main[0]#callx",
        "main[0]/resume",
        "main[0]#args/resume",
        "main[0]#fin/resume",
        "main[0]#wait/resume/resume",
        "main[0]x",
        "init/resume",
    ] {
        assert!(text.parse::<TransitionKey>().is_err(), "{text}");
    }
    assert!("main[0].then".parse::<StepKey>().is_err());
    assert_eq!(
        "main[0].then[1]".parse::<StepKey>().map(|k| k.as_str().to_owned()),
        Ok("main[0].then[1]".into())
    );
}
