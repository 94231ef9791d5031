//! A tenant controller copying a shared Secret into a namespace it manages, with copy-core's
//! consent check, desired-copy computation and (against a cluster) its executor.
//!
//! Offline (no `KUBECONFIG`): prints the desired copy of a demo Secret, data redacted.
//! With `KUBECONFIG` set: copies `SOURCE_NS/NAME` into `TARGET_NS` on that cluster.
//!
//! ```sh
//! cargo run -p conflux-examples --example copy_secret
//! KUBECONFIG=~/.kube/config cargo run -p conflux-examples --example copy_secret -- flux-system ghcr-auth team-a
//! ```

use anyhow::{Context, bail};
use conflux_examples::copy_secret::{demo_source, desired_copy, redacted, sync};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if std::env::var_os("KUBECONFIG").is_none() {
        return offline();
    }
    let [source_ns, name, target_ns] = args.as_slice() else {
        bail!("usage (with KUBECONFIG): copy_secret SOURCE_NAMESPACE NAME TARGET_NAMESPACE");
    };
    let client = kube::Client::try_default()
        .await
        .context("connecting to the cluster of KUBECONFIG")?;
    let mode = sync(&client, source_ns, name, target_ns).await?;
    println!("Secret {source_ns}/{name} → {target_ns}/{name}: {mode:?}");
    Ok(())
}

fn offline() -> anyhow::Result<()> {
    let source = demo_source()?;
    println!("source (flux-system/ghcr-auth, consents to team-*):");
    println!(
        "{}",
        serde_json::to_string_pretty(&redacted(&source.clone().into())?)?
    );
    let desired = desired_copy(&source, "team-a", None)?;
    println!("\ndesired copy in team-a ({:?}):", desired.mode);
    println!(
        "{}",
        serde_json::to_string_pretty(&redacted(&desired.object)?)?
    );
    match desired_copy(&source, "default", None) {
        Ok(_) => bail!("the source does not consent to default; the copy should be refused"),
        Err(refused) => println!("\ncopy into default: {refused}"),
    }
    Ok(())
}
