//! A write answered 2xx survives SIGKILL of the real binary.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use agent_platform_tests::{Client, Process, types};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_writes_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut acknowledged = Vec::new();
    let mut key = None;
    for round in 0..3 {
        let p = Process::serve(&data);
        if round == 0 {
            key = p.key.clone();
        }
        let key = key.clone().expect("the first start printed a key");
        let client = Client::with_key(&p.base, &key).unwrap();
        // Everything acknowledged before is still there after the kill.
        for (id, name) in &acknowledged {
            let a =
                client.agent_get().id(*id).send().await.unwrap_or_else(|e| panic!("lost agent {id}: {e}"));
            assert_eq!(&a.name, name);
        }
        // Concurrent writers; the process is killed while they are still writing.
        let answered = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for w in 0..8 {
            let client = client.clone();
            let answered = answered.clone();
            tasks.push(tokio::spawn(async move {
                let mut done = Vec::new();
                for i in 0.. {
                    let name = format!("r{round}w{w}n{i}");
                    match client
                        .agent_create()
                        .body(types::CreateAgentRequest::builder().name(name.clone()))
                        .send()
                        .await
                    {
                        Ok(a) => {
                            done.push((a.id, name));
                            answered.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(_) => break, // the server is gone
                    }
                }
                done
            }));
        }
        // The first write after a start can take long (lazy initialisation, a
        // busy disk): kill 400 ms after writes are being answered.
        let deadline = Instant::now() + Duration::from_secs(60);
        while answered.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "no write answered in 60 s");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(400)).await;
        p.kill();
        for t in tasks {
            acknowledged.extend(t.await.unwrap());
        }
        assert!(!acknowledged.is_empty());
    }
    let p = Process::serve(&data);
    let client = Client::with_key(&p.base, key.as_ref().unwrap()).unwrap();
    let mut listed = 0;
    let mut offset = 0;
    loop {
        let page = client.agent_list().limit(1000).offset(offset).send().await.unwrap().into_inner().items;
        if page.is_empty() {
            break;
        }
        listed += page.len();
        offset += page.len() as u64;
    }
    assert!(listed >= acknowledged.len(), "listed {listed} < acknowledged {}", acknowledged.len());
    for (id, name) in &acknowledged {
        assert_eq!(&client.agent_get().id(*id).send().await.unwrap().name, name);
    }
    eprintln!("{} acknowledged writes over 3 SIGKILLs, none lost", acknowledged.len());
    p.kill();
}
