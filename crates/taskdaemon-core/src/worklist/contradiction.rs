//! Layer 1 of spec 5's verification: a completion claim whose words hand work back to a
//! human ("you need to manually configure the DNS record", "please run the migration",
//! "TODO for the user: …", "I couldn't log in, so you'll have to …"). Sentence by
//! sentence: a sentence that says no such work is left ("no manual steps are needed",
//! "instead of manual testing") is never a contradiction.

/// Phrases that defer work to a person wherever they appear in a sentence.
const DEFERRALS: &[&str] = &[
    "you need to",
    "you'll need to",
    "you will need to",
    "you would need to",
    "you must",
    "you have to",
    "you'll have to",
    "you will have to",
    "you should run",
    "you should manually",
    "requires a human",
    "requires human",
    "require a human",
    "needs a human",
    "needs human",
    "need a human",
    "human intervention",
    "human verification",
    "a human must",
    "someone needs to",
    "someone must",
    "someone will need to",
    "todo for the user",
    "todo for you",
    "left for the user",
    "left for you",
    "the user must",
    "the user needs to",
    "the user will need to",
    "the user has to",
    "requires manual",
    "manual testing",
    "manual verification",
    "manual intervention",
    "manual configuration",
    "manual action",
    "manual step",
    "manual setup",
    "cannot be automated",
    "can't be automated",
    "could not complete",
    "couldn't complete",
    "unable to complete",
    "was not able to complete",
    "by hand",
];

/// "please" followed by one of these is a request to the reader.
const PLEASE_VERBS: &[&str] = &[
    "run",
    "configure",
    "set",
    "install",
    "verify",
    "add",
    "create",
    "update",
    "deploy",
    "restart",
    "enable",
    "check",
    "test",
    "log",
    "sign",
    "provide",
    "manually",
    "apply",
    "rotate",
    "approve",
    "click",
    "make",
    "publish",
    "push",
    "merge",
];

/// A sentence with one of these says the work is not left for anyone.
const NEGATIONS: &[&str] = &[
    "no manual",
    "without manual",
    "instead of manual",
    "rather than manual",
    "no longer",
    "not required",
    "not needed",
    "no need",
    "nothing",
    "never",
    "don't need",
    "do not need",
    "doesn't need",
    "does not need",
    "isn't needed",
    "no human",
    "removed the manual",
    "no more manual",
];

/// "I couldn't …, so …" hands work over when the rest names a person or a manual way.
const INABILITY: &[&str] = &[
    "i couldn't",
    "i could not",
    "i was unable",
    "i wasn't able",
    "i was not able",
    "i can't",
    "i cannot",
];
const HANDOVER: &[&str] = &[
    "you", "the user", "a human", "someone", "manually", "by hand",
];

fn sentences(text: &str) -> impl Iterator<Item = &str> {
    text.split(['.', '!', '?', '\n', ';'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

fn deferral(sentence: &str) -> bool {
    let s = sentence;
    if NEGATIONS.iter().any(|n| s.contains(n)) {
        return false;
    }
    if DEFERRALS.iter().any(|d| s.contains(d)) {
        return true;
    }
    let words: Vec<&str> = s
        .split(|c: char| !c.is_alphanumeric() && c != '\'')
        .filter(|w| !w.is_empty())
        .collect();
    if words
        .windows(2)
        .any(|w| w[0] == "please" && PLEASE_VERBS.contains(&w[1]))
    {
        return true;
    }
    if s.contains("manually")
        && ["need", "must", "have to", "should", "requires", "required"]
            .iter()
            .any(|w| s.contains(w))
    {
        return true;
    }
    INABILITY.iter().any(|i| s.contains(i))
        && s.contains(" so ")
        && s.split(" so ")
            .skip(1)
            .any(|rest| HANDOVER.iter().any(|h| rest.contains(h)))
}

/// The first sentence of `words` that leaves work to a human, shortened.
pub fn contradiction(words: &str) -> Option<String> {
    let lower = words.to_lowercase().replace(['’', '‘'], "'");
    let found = sentences(&lower).find(|s| deferral(s))?;
    let mut out: String = found.chars().take(120).collect();
    if found.chars().count() > 120 {
        out.push('…');
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::contradiction;

    const REJECTED: &[&str] = &[
        "you need to manually configure the DNS record … TASK_COMPLETE",
        "You'll need to add the API key to .env before it works.",
        "You will need to restart the server. TASK_COMPLETE",
        "Please run `npm run migrate` on production.",
        "Please configure the webhook in the dashboard.",
        "This requires a human to approve the OAuth app.",
        "Needs human verification in a browser.",
        "TODO for the user: set the STRIPE_KEY secret.",
        "I couldn't access the database, so you'll have to run the migration.",
        "I couldn't log in to the registry, so the package must be published by hand.",
        "I was unable to reach the server, so someone should deploy it.",
        "Manual testing is required for the payment flow.",
        "Some manual steps remain: create the S3 bucket.",
        "The DNS change cannot be automated.",
        "I was unable to complete the deployment.",
        "The user must set the environment variable.",
        "You must enable the feature flag in the admin panel.",
        "Left for you: rotate the credentials.",
        "Someone needs to click through the UI to verify it.",
        "Requires manual intervention to finish the setup.",
        "After merging, you have to update the DNS record.",
        "It still needs to be deployed by hand.",
        "The certificate should be renewed manually before Friday, it is required.",
        "Everything works — you’ll need to set the token yourself though.",
    ];

    const ACCEPTED: &[&str] = &[
        "All tests pass. TASK_COMPLETE",
        "I manually verified the output matches the spec.",
        "Implemented the parser and added unit tests; cargo test passes.",
        "No manual steps are needed: the migration runs on startup.",
        "The user no longer needs to configure the DNS record by hand.",
        "Removed the manual setup step from the README.",
        "You can run `cargo test` to see the new tests.",
        "Please note that the API is unchanged.",
        "I couldn't find any remaining TODOs, so the task is complete.",
        "The human-readable output now includes the count.",
        "Documented how a user can configure the theme.",
        "Added a check so that users never need to edit the config manually.",
        "Verified with an automated test instead of manual testing.",
        "The requirements.md file lists every step.",
        "Fixed the TODO in src/main.rs.",
        "Task 2.1 is done; the next task will add the CLI flag.",
        "The script runs the migrations automatically.",
        "Everything is committed and the Verify command passes.",
        "The user's settings are preserved across restarts.",
        "Refactored the module; behaviour is unchanged.",
        "I could not reproduce the old crash after the fix, so the regression test now passes.",
        "Handled the case where the user needs no account.",
        "Wrote the setup as a script: nothing is left to do by a person.",
    ];

    #[test]
    fn deferred_human_work_is_a_contradiction() {
        assert!(REJECTED.len() >= 20);
        for s in REJECTED {
            assert!(contradiction(s).is_some(), "not caught: {s}");
        }
    }

    #[test]
    fn ordinary_completion_messages_are_not() {
        assert!(ACCEPTED.len() >= 20);
        for s in ACCEPTED {
            assert_eq!(contradiction(s), None, "false positive: {s}");
        }
    }
}
