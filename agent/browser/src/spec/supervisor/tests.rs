use super::*;
use crate::spec::Operator;

const KEY: &str = "chromium:default";

fn supervisor() -> Supervisor {
    Supervisor::new(Policy::default())
}

#[test]
fn launch_is_idempotent_per_instance_key() {
    let mut s = supervisor();
    assert_eq!(s.launch(KEY, 0), Ok(Launch::Spawn { boot_id: 1 }));
    // While starting: no second spawn.
    assert_eq!(s.launch(KEY, 10), Ok(Launch::AlreadyStarting { boot_id: 1 }));
    s.probe_succeeded(KEY, 0);
    assert_eq!(s.launch(KEY, 20), Ok(Launch::AlreadyRunning { boot_id: 1 }));
    s.probe_failed(KEY, 0);
    assert_eq!(s.health(KEY).state, InstanceState::Degraded);
    assert_eq!(s.launch(KEY, 30), Ok(Launch::AlreadyRunning { boot_id: 1 }));
    // Another key is another instance.
    assert_eq!(s.launch("chromium:work", 30), Ok(Launch::Spawn { boot_id: 1 }));
}

#[test]
fn crash_loop_after_three_consecutive_failures_and_no_fourth_spawn() {
    let mut s = supervisor();
    for (i, now) in [0u64, 1_000, 2_000].into_iter().enumerate() {
        assert!(matches!(s.launch(KEY, now), Ok(Launch::Spawn { .. })));
        let looping = s.launch_failed(KEY, now + 10, "exited with status 1");
        assert_eq!(looping, i == 2);
    }
    let health = s.health(KEY);
    assert_eq!(health.state, InstanceState::CrashLooping);
    assert_eq!(health.reason.as_deref(), Some("exited with status 1"));
    let refused = s.launch(KEY, 3_000).unwrap_err();
    assert_eq!(refused.code, ToolErrorCode::CrashLooping);
    assert_eq!(refused.cause.as_ref().unwrap()["lastFailure"], "exited with status 1");
    assert!(refused.message.contains("exited with status 1"));
}

#[test]
fn failures_outside_the_window_or_broken_by_a_success_do_not_count() {
    let mut s = supervisor();
    s.launch(KEY, 0).unwrap();
    s.launch_failed(KEY, 0, "a");
    s.launch(KEY, 1).unwrap();
    s.launch_failed(KEY, 1, "b");
    // The third failure comes after the window: only two in it.
    s.launch(KEY, 400_000).unwrap();
    assert!(!s.launch_failed(KEY, 400_000, "c"));
    // A success resets the run of failures.
    s.launch(KEY, 400_001).unwrap();
    s.probe_succeeded(KEY, 0);
    s.stop(KEY, 0);
    s.gone(KEY, 0);
    s.launch(KEY, 400_002).unwrap();
    assert!(!s.launch_failed(KEY, 400_002, "d"));
    assert_eq!(s.health(KEY).state, InstanceState::Stopped);
}

#[test]
fn time_and_retries_never_clear_a_crash_loop_only_an_operator_reset() {
    let mut s = supervisor();
    for now in [0, 1, 2] {
        s.launch(KEY, now).unwrap();
        s.launch_failed(KEY, now, "boom");
    }
    for now in [10_000_000, 100_000_000] {
        assert!(s.tick(KEY, now).is_none());
        assert!(s.launch(KEY, now).is_err());
        assert!(matches!(
            s.call(KEY, now),
            CallGate::Refuse(ToolError {
                code: ToolErrorCode::CrashLooping,
                ..
            })
        ));
    }
    assert_eq!(
        s.reset(
            KEY,
            100_000_001,
            OperatorReset::new(&Operator::from_operator_channel("test"))
        ),
        Ok(Launch::Spawn { boot_id: 4 })
    );
    assert_eq!(s.health(KEY).state, InstanceState::Starting);
    assert_eq!(s.health(KEY).reason, None);
}

#[test]
fn a_slow_launch_that_keeps_progressing_is_neither_killed_nor_counted() {
    let mut s = supervisor();
    s.launch(KEY, 0).unwrap();
    // Progress every 5 s, well past the 120 s budget.
    for now in (5_000..=300_000).step_by(5_000) {
        s.progress(KEY, now);
        assert_eq!(s.tick(KEY, now), None, "killed at {now} ms while progressing");
    }
    s.probe_succeeded(KEY, 0);
    assert_eq!(s.health(KEY).state, InstanceState::Healthy);
    assert_eq!(s.health(KEY).reason, None);
}

#[test]
fn a_launch_with_no_progress_fails_at_the_budget_and_any_launch_at_the_hard_ceiling() {
    let mut s = supervisor();
    s.launch(KEY, 0).unwrap();
    s.progress(KEY, 100_000);
    // At the budget, progress 20 s ago (window 10 s): failed.
    assert_eq!(s.tick(KEY, 119_999), None);
    let stalled = s.tick(KEY, 120_000).unwrap();
    assert!(stalled.reason.contains("no progress"), "{}", stalled.reason);
    assert!(!stalled.crash_looping);
    assert_eq!(s.health(KEY).state, InstanceState::Stopped);

    s.launch(KEY, 200_000).unwrap();
    let mut now = 200_000;
    while now < 200_000 + 360_000 {
        s.progress(KEY, now);
        assert_eq!(s.tick(KEY, now), None);
        now += 1_000;
    }
    let stalled = s.tick(KEY, 560_000).unwrap();
    assert!(stalled.reason.contains("hard ceiling"), "{}", stalled.reason);
}

#[test]
fn calls_while_starting_wait_the_remaining_budget_then_fail_retryable() {
    let mut s = supervisor();
    assert!(matches!(
        s.call(KEY, 0),
        CallGate::Refuse(ToolError {
            code: ToolErrorCode::NotReady,
            ..
        })
    ));
    s.launch(KEY, 1_000).unwrap();
    assert_eq!(s.call(KEY, 1_000), CallGate::Wait(120_000));
    assert_eq!(s.call(KEY, 100_000), CallGate::Wait(21_000));
    s.progress(KEY, 120_500);
    match s.call(KEY, 121_000) {
        CallGate::Refuse(error) => {
            assert_eq!(error.code, ToolErrorCode::Starting);
            assert_eq!(error.retryable, Some(true));
        }
        other => panic!("{other:?}"),
    }
    s.probe_succeeded(KEY, 0);
    assert_eq!(s.call(KEY, 122_000), CallGate::Proceed);
}

#[test]
fn not_ready_carries_the_state_and_stop_is_idempotent() {
    let mut s = supervisor();
    s.launch(KEY, 0).unwrap();
    s.probe_succeeded(KEY, 0);
    assert!(s.stop(KEY, 0));
    assert!(!s.stop(KEY, 0), "a second stop changes nothing");
    match s.call(KEY, 1) {
        CallGate::Refuse(error) => {
            assert_eq!(error.code, ToolErrorCode::NotReady);
            assert_eq!(error.cause.unwrap()["state"], "stopping");
        }
        other => panic!("{other:?}"),
    }
    s.gone(KEY, 0);
    assert_eq!(s.health(KEY).state, InstanceState::Stopped);
    assert!(!s.stop(KEY, 0));
    // Relaunch: a new boot.
    assert_eq!(s.launch(KEY, 2), Ok(Launch::Spawn { boot_id: 2 }));
}

#[test]
fn failures_and_crash_looping_outlive_the_host_and_nothing_else_does() {
    let mut first = Supervisor::new(Policy::default());
    first.launch(KEY, 0).unwrap();
    assert!(
        first.records().is_empty(),
        "a starting instance without failures has nothing to keep"
    );
    first.launch_failed(KEY, 10, "boom");
    first.launch(KEY, 20).unwrap();
    first.launch_failed(KEY, 30, "boom again");
    let records = first.records();
    assert_eq!(records[KEY].failures, [10, 30]);
    assert!(!records[KEY].crash_looping);

    // A new host: one more failure within the window makes three.
    let mut second = Supervisor::new(Policy::default());
    second.restore(KEY, records[KEY].clone());
    assert_eq!(second.health(KEY).state, InstanceState::Stopped);
    second.launch(KEY, 40).unwrap();
    assert!(second.launch_failed(KEY, 50, "third"));
    let records = second.records();
    assert!(records[KEY].crash_looping);

    // A third host stays crash-looping: no launch until an operator resets it.
    let mut third = Supervisor::new(Policy::default());
    third.restore(KEY, records[KEY].clone());
    assert_eq!(third.health(KEY).state, InstanceState::CrashLooping);
    assert_eq!(
        third.launch(KEY, 1_000_000).unwrap_err().code,
        ToolErrorCode::CrashLooping
    );
    assert!(matches!(
        third.reset(
            KEY,
            1_000_001,
            OperatorReset::new(&Operator::from_operator_channel("test"))
        ),
        Ok(Launch::Spawn { .. })
    ));
}

#[test]
fn an_exit_under_a_running_instance_stops_it_with_the_reason_and_backs_off_then_leaves_it_to_the_next_call() {
    let policy = Policy::default();
    let mut supervisor = Supervisor::new(policy);
    // Not running: nothing to do.
    assert_eq!(supervisor.exited(KEY, 0, "gone"), None);
    supervisor.launch(KEY, 0).unwrap();
    assert_eq!(
        supervisor.exited(KEY, 1, "gone"),
        None,
        "a starting instance's exit is a failed launch"
    );
    supervisor.probe_succeeded(KEY, 2);
    assert_eq!(
        supervisor.exited(KEY, 1_000, "the browser exited (signal: 9 (SIGKILL))"),
        Some(Relaunch::After { delay: 0, exits: 1 })
    );
    let health = supervisor.health(KEY);
    assert_eq!(health.state, InstanceState::Stopped);
    assert_eq!(
        health.reason.as_deref(),
        Some("the browser exited (signal: 9 (SIGKILL))")
    );
    assert_eq!(health.checked_at, 1_000);
    // Calls meanwhile are refused `browser:not_ready` with the state; the relaunch clears the reason.
    assert_eq!(
        supervisor.call(KEY, 1_001),
        CallGate::Refuse(supervisor_not_ready("stopped"))
    );
    assert!(matches!(
        supervisor.launch(KEY, 1_002),
        Ok(Launch::Spawn { boot_id: 2 })
    ));
    supervisor.probe_succeeded(KEY, 1_003);
    assert_eq!(supervisor.health(KEY).reason, None);
    // A degraded instance exits too; the second exit in the window waits 500 ms.
    supervisor.probe_failed(KEY, 1_004);
    assert_eq!(
        supervisor.exited(KEY, 2_000, "again"),
        Some(Relaunch::After { delay: 500, exits: 2 })
    );
    supervisor.launch(KEY, 2_500).unwrap();
    supervisor.probe_succeeded(KEY, 2_600);
    // The third within the window: no relaunch by itself.
    assert_eq!(
        supervisor.exited(KEY, 3_000, "and again"),
        Some(Relaunch::OnNextCall { exits: 3 })
    );
    assert_eq!(supervisor.health(KEY).state, InstanceState::Stopped);
    // Past the window the count starts over.
    supervisor.launch(KEY, 3_100).unwrap();
    supervisor.probe_succeeded(KEY, 3_200);
    let later = 3_000 + policy.failure_window;
    assert_eq!(
        supervisor.exited(KEY, later, "much later"),
        Some(Relaunch::After { delay: 0, exits: 1 })
    );
}

fn supervisor_not_ready(state: &str) -> ToolError {
    ToolError::new(ToolErrorCode::NotReady, format!("the browser is {state}, not ready"))
        .with_cause(serde_json::json!({ "state": state }))
}
