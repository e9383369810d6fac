//! The browser harness's own checks (tests/src/browser.rs) see what they say
//! they check, on a page made to fail each of them: the console's tests rely
//! on them passing only when the console is right.

use agent_platform_tests::browser::Browser;

/// A page that reaches another host, throws, has a field without a label and
/// a button Tab skips; then a page that does none of that.
#[tokio::test]
async fn each_check_fails_on_a_page_made_to_fail_it() {
    let Some(browser) = Browser::start().await else { return };
    let bad = "data:text/html,<!doctype html><title>bad</title>\
        <img src='http://elsewhere.example/pixel.png' alt='x'>\
        <label for=a>Name</label><input id=a>\
        <input id=b>\
        <button tabindex=-1>Skipped</button>\
        <script>throw new Error('boom')</script>";
    browser.open(bad).await;
    browser.wait_for_text("Name").await;
    let elsewhere = browser.requests_elsewhere("http://127.0.0.1:1").await;
    assert!(elsewhere.iter().any(|url| url.starts_with("http://elsewhere.example/")), "{elsewhere:?}");
    let errors = browser.logged_errors().await;
    assert!(errors.iter().any(|e| e.contains("boom")), "{errors:?}");
    let unlabelled = browser.unlabelled_controls().await;
    assert_eq!(unlabelled.len(), 1, "{unlabelled:?}");
    assert!(unlabelled[0].contains("id=\"b\""), "{unlabelled:?}");
    let unreachable = browser.unreachable_by_keyboard().await;
    assert_eq!(unreachable.len(), 1, "{unreachable:?}");
    assert!(unreachable[0].contains("Skipped"), "{unreachable:?}");

    let good = "data:text/html,<!doctype html><title>good</title>\
        <label for=a>Name</label><input id=a><button>Save</button><a href='%23/x'>Next</a>";
    browser.open(good).await;
    browser.wait_for_text("Save").await;
    let shot = browser.screenshot("harness-good").await;
    assert!(std::fs::metadata(&shot).unwrap().len() > 100, "{shot:?}");
    // The earlier page's requests stay recorded; only the new page is checked here.
    assert!(browser.logged_errors().await.is_empty());
    assert!(browser.unlabelled_controls().await.is_empty());
    assert!(browser.unreachable_by_keyboard().await.is_empty());
}
