//! The short table of `twice serve --help`: for each SDK twice is tested with, the line that
//! points it at its fake, and the credentials each fake accepts. `docs/clients.md` holds the
//! same lines in whole snippets, each run by a test; a test checks every line here is there.

/// An SDK and the line that points it at its fake (`*_url`/`*Url`: the service's base URL,
/// as serve prints it and writes it to `--urls-file`).
pub const SDK_LINES: [(&str, &str); 8] = [
    ("stripe-python", r#"stripe.StripeClient("sk_test_twice", base_addresses={"api": payments_url})"#),
    (
        "stripe-node",
        r#"new Stripe("sk_test_twice", { host: payments.hostname, port: payments.port, protocol: "http" })"#,
    ),
    (
        "boto3",
        r#"boto3.client("s3", endpoint_url=files_url, region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test")"#,
    ),
    (
        "AWS SDK v3",
        r#"new S3Client({ endpoint: filesUrl, region: "us-east-1", forcePathStyle: true, credentials: { accessKeyId: "test", secretAccessKey: "test" } })"#,
    ),
    ("web3.py", r#"Web3(Web3.HTTPProvider(chain_url))"#),
    ("viem", r#"createWalletClient({ account, chain: foundry, transport: http(chainUrl) })"#),
    ("resend (Python)", r#"resend.api_key = "re_test_twice"; resend.api_url = messages_url"#),
    ("resend (Node)", r#"new Resend("re_test_twice", { baseUrl: messagesUrl })"#),
];

/// What each fake accepts as credentials.
pub const CREDENTIALS: [(&str, &str); 5] = [
    ("payments", "any non-empty key (sk_test_twice); with --strict-keys only sk_test_twice and seeded keys"),
    ("workspaces", "no credentials"),
    ("files", "any access key id and secret: SigV4 signatures are not checked"),
    (
        "chain",
        "the funded dev accounts serve prints (chain id 31337); a scenario's own account: GET /__twice/scenario",
    ),
    ("messages", "a key that starts with re_ (re_test_twice)"),
];

/// The text after `twice serve --help`'s options.
pub fn help() -> String {
    let mut text = String::from(
        "Pointing an SDK at a fake (docs/clients.md has each as a whole snippet; in stripe-node,\n\
         `payments` is `new URL(paymentsUrl)`; in viem, `foundry` is from viem/chains and `account`\n\
         a dev account's privateKeyToAccount):\n",
    );
    for (sdk, line) in SDK_LINES {
        text.push_str(&format!("  {sdk:<16} {line}\n"));
    }
    text.push_str("\nCredentials each fake accepts:\n");
    for (service, accepted) in CREDENTIALS {
        text.push_str(&format!("  {service:<11} {accepted}\n"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The short table and the page say the same: every line here is in `docs/clients.md`,
    /// whose snippets a test runs against the real SDKs (`tests/it/clients_doc.rs`).
    #[test]
    fn every_line_of_the_help_is_in_the_clients_page() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/clients.md");
        let page = std::fs::read_to_string(&path).unwrap();
        for (sdk, line) in SDK_LINES {
            assert!(page.contains(line), "docs/clients.md has no line for {sdk}: {line}");
        }
        for (service, _) in CREDENTIALS {
            assert!(page.contains(&format!("`{service}`")), "docs/clients.md never names {service}");
        }
        assert!(help().contains("--strict-keys"));
    }
}
