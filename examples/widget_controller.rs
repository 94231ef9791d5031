//! A third-party controller for its own CRD, `Widget` (`example.conflux.dev/v1`), that
//! reconciles a Widget whenever the Secret named by its `spec.secretRef.name` changes, with
//! Flux's watch-configs behaviour (`reconcile.fluxcd.io/watch=Enabled`, first list = baseline,
//! re-lists diffed) from `conflux_watch_index::runtime`. The controller is
//! `conflux_examples::widget::WidgetController`; the wiring is marked in its source.
//!
//! Run against the cluster of `KUBECONFIG`:
//!
//! ```sh
//! cargo run -p conflux-examples --example widget_controller -- crd | kubectl apply -f -
//! cargo run -p conflux-examples --example widget_controller            # all namespaces
//! cargo run -p conflux-examples --example widget_controller -- run NS  # one namespace
//! ```

use anyhow::{Context, bail};
use conflux_examples::widget::{Widget, WidgetController, WidgetControllerConfig};
use kube::CustomResourceExt;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let namespace = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["crd"] => {
            // JSON is YAML; kubectl takes either.
            println!("{}", serde_json::to_string_pretty(&Widget::crd())?);
            return Ok(());
        }
        [] | ["run"] => None,
        ["run", ns] => Some(ns.to_owned()),
        _ => bail!("usage: widget_controller [crd | run [NAMESPACE]]"),
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let client = kube::Client::try_default()
        .await
        .context("connecting to the cluster of KUBECONFIG")?;
    let config = WidgetControllerConfig {
        namespace,
        ..WidgetControllerConfig::default()
    };
    let controller = WidgetController::new(client, &config)?;
    tracing::info!("widget controller started; Ctrl-C stops it");
    tokio::select! {
        () = controller.run() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(())
}
