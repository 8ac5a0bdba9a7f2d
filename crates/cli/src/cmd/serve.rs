//! `zmem serve`: zram stores as NBD exports or ublk block devices, with a
//! control socket.
//!
//! This module owns the command: it turns the flags ([`flags`]) into a
//! [`serve::ServerConfig`] (the exports and their store configurations,
//! the front end, the sockets) and loads the TLS certificates, starts the
//! [`serve::Server`], waits for SIGINT or SIGTERM and shuts the server
//! down. The start-up sequence and the shutdown's order are the server's.
//!
//! Exports and store configurations: the store flags take comma lists, as
//! in `zmem replay`, and expand to N configurations. With no `--export`,
//! each configuration gets an export named zram0, zram1, ... With
//! `--export` given, one configuration applies to every export, or N
//! exports pair with the N configurations in order. `--export NAME:0`
//! starts an export uninitialised (zram's disksize 0): `zmem ctl --export
//! NAME disksize SIZE` initialises it. Each export's configuration is also
//! its store factory (`recipe::SpecFactory`): a reset export is made again
//! with it, and `zmem ctl hot_add` uses the first configuration.

use std::sync::Arc;
use std::time::Duration;

use log::info;
use nbd::Config;
use recipe::{PolicyFlags, StoreSpec};
use serve::{
    ExportConfig, Front, Listen, NbdFront, ServeError, Server, ServerConfig, StoreSettings,
    UblkFront,
};

use crate::error::CliError;
use crate::{logger, signals};

mod flags;

pub use flags::ServeArgs;
use flags::{parse_export, ExportSpec, TlsArg, EXPORT_MAX};

/// The TLS configuration the flags ask for (`None`: off), with the
/// certificates loaded; errors are one line naming the flag or file.
fn tls_config(args: &ServeArgs) -> Result<Option<Arc<nbd::Tls>>, CliError> {
    let mode = match args.tls {
        TlsArg::Off => {
            if args.tls_certificates.is_some() || args.tls_verify_peer {
                return Err(CliError::Usage(
                    "--tls-certificates and --tls-verify-peer need --tls on or --tls require"
                        .into(),
                ));
            }
            return Ok(None);
        }
        TlsArg::On => nbd::TlsMode::On,
        TlsArg::Require => nbd::TlsMode::Require,
    };
    let Some(dir) = &args.tls_certificates else {
        return Err(CliError::Usage(format!(
            "--tls {} needs --tls-certificates DIR (with {} and {})",
            if mode == nbd::TlsMode::On {
                "on"
            } else {
                "require"
            },
            nbd::SERVER_CERT,
            nbd::SERVER_KEY
        )));
    };
    nbd::Tls::from_dir(dir, mode, args.tls_verify_peer)
        .map(|t| Some(Arc::new(t)))
        .map_err(|e| CliError::Failed(format!("--tls-certificates: {e}")))
}

/// The policy flags, kept by the store factory so that every store it
/// makes (at start, by `hot_add` or after a `reset`) runs the same rules
/// (checked against the others when the server starts).
fn policy_flags(args: &ServeArgs) -> PolicyFlags {
    PolicyFlags {
        idle_after: args.idle_after,
        interval: args.policy_interval,
        auto_recompress: args.auto_recompress,
        auto_writeback: args.auto_writeback,
        writeback_near_limit: args.writeback_near_limit,
    }
}

/// The exports to make, each with its configuration and backing device
/// (`--backing-dev` paths pair with the exports in order).
fn plan(args: &ServeArgs) -> Result<Vec<ExportConfig>, CliError> {
    let specs = args.store.specs()?;
    if args.size == 0 {
        return Err(CliError::Usage("--size must be more than 0".into()));
    }
    let named: Vec<(ExportSpec, StoreSpec)> = if args.exports.is_empty() {
        specs
            .into_iter()
            .enumerate()
            .map(|(i, spec)| ((format!("zram{i}"), args.size, args.read_only), spec))
            .collect()
    } else {
        let named: Vec<ExportSpec> = args
            .exports
            .iter()
            .map(|e| parse_export(e, args.size))
            .collect::<Result<_, _>>()?;
        let specs: Vec<StoreSpec> = match specs.len() {
            1 => vec![specs[0].clone(); named.len()],
            n if n == named.len() => specs,
            n => {
                return Err(CliError::Usage(format!(
                    "{} --export flags but {n} store configurations: give one configuration, \
                     or one --export per configuration",
                    named.len()
                )))
            }
        };
        named
            .into_iter()
            .map(|(n, s, ro)| (n, s, ro || args.read_only))
            .zip(specs)
            .collect()
    };
    if args.backing_devs.len() > named.len() {
        return Err(CliError::Usage(format!(
            "{} --backing-dev paths for {} exports (one per export, in order)",
            args.backing_devs.len(),
            named.len()
        )));
    }
    Ok(named
        .into_iter()
        .enumerate()
        .map(|(i, ((name, size, read_only), spec))| ExportConfig {
            name,
            size,
            read_only,
            spec,
            backing_dev: args.backing_devs.get(i).cloned(),
        })
        .collect())
}

/// The NBD front end the flags ask for: the listener (systemd's, TCP or a
/// Unix socket) and the server's limits.
fn nbd_front(args: &ServeArgs, tls: Option<Arc<nbd::Tls>>) -> Result<NbdFront, CliError> {
    let inherited = crate::activation::inherited_listener().map_err(CliError::Failed)?;
    let listen = match (inherited, args.tcp, &args.socket) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
            return Err(CliError::Usage(
                "started with a socket from systemd: --socket and --tcp do not apply".into(),
            ))
        }
        (Some(l), None, None) => Listen::Inherited(l),
        (None, Some(tcp), _) => Listen::Tcp(tcp),
        (None, None, socket) => Listen::Unix(socket.clone()),
    };
    let defaults = Config::default();
    let secs = |s: u32| Duration::from_secs(u64::from(s));
    let config = Config {
        workers: args
            .workers
            .map_or_else(Config::default_workers, usize::from),
        allow_remote: args.allow_remote,
        insecure: args.insecure,
        tls,
        handshake_timeout: args
            .handshake_limit
            .map_or(defaults.handshake_timeout, secs),
        max_connections: args
            .max_connections
            .map_or(defaults.max_connections, |n| n as usize),
        max_handshakes: args
            .max_handshakes
            .map_or(defaults.max_handshakes, |n| n as usize),
        stall_timeout: args.stall_limit.map_or(defaults.stall_timeout, secs),
        ..defaults
    };
    Ok(NbdFront {
        listen,
        config,
        inflight_per_conn: args.inflight_per_conn,
        inflight_total: args.inflight_total,
    })
}

/// The server's error as the command's: usage errors exit with 2.
fn cli_error(e: ServeError) -> CliError {
    if e.is_usage() {
        CliError::Usage(e.to_string())
    } else {
        CliError::Failed(e.to_string())
    }
}

/// Runs `zmem serve` until SIGINT or SIGTERM.
pub fn run(args: &ServeArgs) -> Result<(), CliError> {
    let tls = tls_config(args)?;
    logger::init(logger::level(args.log_level));
    // Before any thread exists: every thread inherits the blocked mask.
    let signals = signals::block_termination()
        .map_err(|e| CliError::Failed(format!("cannot block SIGINT/SIGTERM: {e}")))?;
    let exports = plan(args)?;
    let front = if args.ublk {
        Front::Ublk(UblkFront {
            queues: args.ublk_queues,
            depth: args.queue_depth,
        })
    } else {
        Front::Nbd(nbd_front(args, tls)?)
    };
    let server = Server::start(ServerConfig {
        exports,
        store: StoreSettings {
            max_disksize: EXPORT_MAX,
            recomp: args.recomp_algorithms.clone(),
            policy: policy_flags(args),
            writeback_batch: args.writeback_batch_size,
            writeback_compressed: args.writeback_compressed,
        },
        swap: args.swap,
        swap_reserve: args.swap_reserve,
        swap_oom_after: args.swap_oom_after,
        front,
        ctl_socket: args.ctl_socket.clone(),
        metrics: args.metrics,
        allow_remote: args.allow_remote,
        pid_file: args.pid_file.clone(),
    })
    .map_err(cli_error)?;
    let waited = match signals.wait() {
        Ok(sig) => {
            info!("{}: shutting down", signals::name(sig));
            Ok(())
        }
        Err(e) => Err(CliError::Failed(format!("waiting for signals: {e}"))),
    };
    let stopped = server.shutdown().map_err(cli_error);
    waited.and(stopped)
}
