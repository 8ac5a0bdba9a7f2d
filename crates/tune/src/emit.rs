//! The files to install from `zmem advise --system`'s advice (`--emit`):
//! a zram-generator.conf, the sysfs lines as a shell script (in the order
//! the kernel requires), a sysctl.d file, and the `zmem serve` command.
//!
//! zram-generator: Debian 12 ships 1.1.2, whose keys are `zram-size`,
//! `compression-algorithm` (one name: it takes `lz4 zstd(level=3)
//! (type=idle)` as one module name), `writeback-device`, `swap-priority`,
//! `host-memory-limit`, `fs-type`, `mount-point`, `options`. The file
//! holds only those; what a newer zram-generator adds (the recompression
//! chain in `compression-algorithm`, `zram-resident-limit` for
//! `mem_limit`) is written as comments.
//!
//! The sysfs order: `comp_algorithm`, `algorithm_params`,
//! `recomp_algorithm`, `backing_dev` and `compressed_writeback` are refused
//! once the device is initialised, so they come first; then `disksize`;
//! then `mem_limit` and the writeback limits. Attributes this kernel's zram
//! lacks are written as comments saying so.
//!
//! `zswap`: zswap's parameters instead of zram's, as a kernel command line
//! fragment and `/sys/module/zswap/parameters` lines; a file for zram
//! says when zswap is on in front of it ([`zswap_warning`]).
//!
//! This module only formats; every figure comes from [`MachineAdvice`].

use crate::machine::MachineAdvice;

/// What `--emit` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Emit {
    /// `/etc/systemd/zram-generator.conf`.
    ZramGenerator,
    /// A shell script applying the sysfs lines to a device it is given.
    Sysfs,
    /// `/etc/sysctl.d/99-zram.conf`.
    Sysctl,
    /// The `zmem serve` command line.
    Zmem,
    /// zswap instead of zram: a kernel command line fragment and the
    /// `/sys/module/zswap/parameters` lines.
    Zswap,
}

/// The names `--emit` takes.
pub const EMIT_NAMES: [&str; 5] = ["zram-generator", "sysfs", "sysctl", "zmem", "zswap"];

impl Emit {
    /// From its `--emit` name.
    pub fn from_name(s: &str) -> Option<Emit> {
        Some(match s {
            "zram-generator" => Emit::ZramGenerator,
            "sysfs" => Emit::Sysfs,
            "sysctl" => Emit::Sysctl,
            "zmem" => Emit::Zmem,
            "zswap" => Emit::Zswap,
            _ => return None,
        })
    }
}

/// The file for `what`.
pub fn emit(m: &MachineAdvice, what: Emit) -> String {
    match what {
        Emit::ZramGenerator => zram_generator(m),
        Emit::Sysfs => sysfs(m),
        Emit::Sysctl => sysctl(m),
        Emit::Zmem => zmem(m),
        Emit::Zswap => zswap(m),
    }
}

/// The warning a file for zram carries when this kernel's zswap is on
/// (`/sys/module/zswap/parameters/enabled`), `None` otherwise.
pub fn zswap_warning(m: &MachineAdvice, what: Emit) -> Option<String> {
    (what != Emit::Zswap && m.kernel.zswap_enabled == Some(true)).then(|| {
        "zswap is enabled (/sys/module/zswap/parameters/enabled is Y): in front of this zram \
         swap it compresses each page first and zram compresses it again when zswap writes it \
         back; turn it off with echo N > /sys/module/zswap/parameters/enabled and zswap.enabled=0 \
         on the kernel command line"
            .to_string()
    })
}

/// zswap's parameters for this machine: the kernel's compressor, and a
/// `max_pool_percent` that holds the scanned pages at zswap's measured
/// memory per page, at most the target share of RAM.
fn zswap(m: &MachineAdvice) -> String {
    let mut s = format!(
        "# Written by zmem advise from {} ({} pages sampled).\n",
        m.scan.scope, m.advice.sample_pages
    );
    let Some(c) = &m.advice.zram_or_zswap else {
        s.push_str("# No zswap comparison ran: nothing to set.\n");
        return s;
    };
    let z = &c.zswap;
    let settings = &c.zswap_settings;
    let needed = z.predicted_total_bytes;
    let percent =
        crate::front::max_pool_percent_for(needed, m.sizing.mem_total, m.sizing.target_share);
    let ratio = (c.pages * 4096) as f64 / z.total_bytes.max(1) as f64;
    s.push_str(&format!(
        "# zswap (Linux 7.3, modelled) with {}: ratio {ratio:.2} on the sample (pool and \
         metadata);\n# the {} pages scanned need {} MiB, {:.1}% of {} MiB of RAM; \
         max_pool_percent {percent} (at most\n# the target share, {:.0}%). zram would use {} MiB \
         for them (kernel-compat, {}).\n",
        z.comp.name(),
        m.scan.pages,
        mib(needed),
        needed as f64 / m.sizing.mem_total.max(1) as f64 * 100.0,
        mib(m.sizing.mem_total),
        m.sizing.target_share * 100.0,
        mib(c.zram.predicted_total_bytes),
        c.zram.comp.name()
    ));
    s.push_str(&format!(
        "# The advice: use {}: {}\n",
        c.recommend, c.reason
    ));
    if !crate::machine::has_disk_swap() {
        s.push_str(
            "# zswap sits in front of a swap device on disk, and this machine has none: add one \
             (a swap file or partition) first.\n",
        );
    }
    s.push_str(&format!(
        "#\n# On the kernel command line (GRUB_CMDLINE_LINUX in /etc/default/grub, then \
         update-grub):\nzswap.enabled=1 zswap.compressor={} zswap.max_pool_percent={percent} \
         zswap.accept_threshold_percent={}\n",
        z.comp.name(),
        settings.accept_threshold_percent
    ));
    s.push_str(&format!(
        "#\n# Or now, as root (the compressor first: a new pool; enabled last):\n\
         echo {} > /sys/module/zswap/parameters/compressor\n\
         echo {percent} > /sys/module/zswap/parameters/max_pool_percent\n\
         echo {} > /sys/module/zswap/parameters/accept_threshold_percent\n\
         echo Y > /sys/module/zswap/parameters/enabled\n",
        z.comp.name(),
        settings.accept_threshold_percent
    ));
    s
}

fn mib(b: u64) -> u64 {
    b >> 20
}

fn header(m: &MachineAdvice, comment: &str) -> String {
    let c = &m.chosen;
    let warning = match zswap_warning(m, Emit::Sysfs) {
        Some(w) => format!("{comment} Warning: {w}.\n"),
        None => String::new(),
    };
    warning
        + &format!(
            "{comment} Written by zmem advise from {} ({} pages sampled).\n{comment} {} in \
         kernel-compat mode: ratio {:.2} (+/-{:.1}%), at most {:.0}% of {} MiB of RAM \
         compressed.\n",
            m.scan.scope,
            m.advice.sample_pages,
            c.label,
            c.ratio,
            c.sampling_error_pct,
            m.sizing.target_share * 100.0,
            mib(m.sizing.mem_total)
        )
}

/// The recompression chain in a newer zram-generator's syntax.
fn chain(m: &MachineAdvice) -> Option<String> {
    let (algo, level) = m.policy.as_ref()?.recompress.as_ref()?;
    Some(format!(
        "{} {algo}(level={level}) (type=idle)",
        m.chosen.comp
    ))
}

fn zram_generator(m: &MachineAdvice) -> String {
    let c = &m.chosen;
    let mut s = header(m, "#");
    s.push_str("# For systemd-zram-generator 1.1.2 (Debian 12); see zram-generator.conf(5).\n");
    s.push_str("[zram0]\n");
    s.push_str(&format!("zram-size = {}\n", m.sizing.zram_size));
    s.push_str(&format!("compression-algorithm = {}\n", c.comp));
    if let Some(dev) = &m.backing_dev {
        s.push_str(&format!("writeback-device = {dev}\n"));
    }
    s.push_str("swap-priority = 100\n");
    s.push_str("# A newer zram-generator would also take:\n");
    if let Some(ch) = chain(m) {
        s.push_str(&format!("#   compression-algorithm = {ch}\n"));
    }
    if c.level_set {
        s.push_str(&format!(
            "#   compression-algorithm = {}(level={})\n",
            c.comp, c.level
        ));
    }
    s.push_str(&format!(
        "#   zram-resident-limit = {}M   (mem_limit: {:.0}% of RAM)\n",
        mib(m.sizing.mem_limit),
        m.sizing.target_share * 100.0
    ));
    s
}

/// One `echo VALUE > $z/ATTR` line, or a comment where the kernel lacks the
/// attribute.
fn attr_line(m: &MachineAdvice, attr: &str, value: &str, why: &str) -> String {
    if m.kernel.has_attribute(attr) {
        format!("# {why}\necho '{value}' > \"$z/{attr}\"\n")
    } else {
        format!("# {why}: this kernel's zram has no {attr}\n# echo '{value}' > \"$z/{attr}\"\n")
    }
}

fn sysfs(m: &MachineAdvice) -> String {
    let c = &m.chosen;
    let mut s = String::from("#!/bin/sh\n");
    s.push_str(&header(m, "#"));
    s.push_str(
        "# Usage: sh THIS zramN, on a device that is not in use (a fresh one: cat \
         /sys/class/zram-control/hot_add).\nset -e\nz=/sys/block/${1:?usage: $0 zramN}\n\n\
         # Refused once the device is initialised: first.\n",
    );
    s.push_str(&attr_line(m, "comp_algorithm", &c.comp, "the compressor"));
    if c.level_set {
        s.push_str(&attr_line(
            m,
            "algorithm_params",
            &format!("algo={} level={}", c.comp, c.level),
            "its level",
        ));
    }
    if let Some((algo, level)) = m.policy.as_ref().and_then(|p| p.recompress.as_ref()) {
        s.push_str(&attr_line(
            m,
            "recomp_algorithm",
            &format!("algo={algo} priority=1"),
            "the secondary compressor for idle pages",
        ));
        s.push_str(&attr_line(
            m,
            "algorithm_params",
            &format!("algo={algo} level={level}"),
            "its level",
        ));
    }
    if let Some(dev) = &m.backing_dev {
        s.push_str(&attr_line(
            m,
            "backing_dev",
            dev,
            "where idle pages are written back",
        ));
        s.push_str(&attr_line(
            m,
            "compressed_writeback",
            "1",
            "write them back compressed (Linux 7.0)",
        ));
    }
    s.push_str("\n# Then the size, which initialises the device.\n");
    s.push_str(&attr_line(
        m,
        "disksize",
        &format!("{}M", mib(m.sizing.disksize)),
        "disksize: what fits in mem_limit at the measured ratio",
    ));
    s.push_str(&attr_line(
        m,
        "mem_limit",
        &format!("{}M", mib(m.sizing.mem_limit)),
        "mem_limit: the share of RAM compressed pages may hold",
    ));
    if let (Some(p), Some(_)) = (&m.policy, &m.backing_dev) {
        s.push_str(&attr_line(
            m,
            "writeback_limit_enable",
            "1",
            "limit what writeback writes",
        ));
        s.push_str(&attr_line(
            m,
            "writeback_limit",
            &(p.daily_budget_bytes / 4096).to_string(),
            "a day's budget in 4 KiB pages (set it again each day)",
        ));
        s.push_str(&format!(
            "# Each round (every hour, say, from a timer): mark pages idle for {} s, then:\n\
             #   echo {} > \"$z/idle\"\n#   echo idle > \"$z/writeback\"\n",
            p.idle_age_s, p.idle_age_s
        ));
    }
    if let Some(p) = &m.policy {
        if p.recompress.is_some() {
            s.push_str(&format!(
                "# And recompress idle pages each round:\n#   echo {} > \"$z/idle\"\n#   echo \
                 type=idle > \"$z/recompress\"\n",
                p.idle_age_s
            ));
        }
    }
    s.push_str("\n# Then, to swap on it: mkswap /dev/$1 && swapon -p 100 /dev/$1\n");
    s
}

fn sysctl(m: &MachineAdvice) -> String {
    let k = &m.swap_costs;
    let mut s = header(m, "#");
    s.push_str("# /etc/sysctl.d/99-zram.conf\n");
    match k.swappiness {
        Some(v) => s.push_str(&format!("# {}\nvm.swappiness = {v}\n", k.swappiness_reason)),
        None => s.push_str(&format!("# vm.swappiness: {}\n", k.swappiness_reason)),
    }
    s.push_str(&format!(
        "# {}\nvm.page-cluster = {}\n",
        k.page_cluster_reason, k.page_cluster
    ));
    s
}

fn zmem(m: &MachineAdvice) -> String {
    let c = &m.chosen;
    let mut s = header(m, "#");
    let mut cmd = format!(
        "zmem serve --mode kernel-compat --comp {} --size {}M --mem-limit {}M",
        c.comp,
        mib(m.sizing.disksize),
        mib(m.sizing.mem_limit)
    );
    if c.level_set {
        cmd.push_str(&format!(" --comp-params level={}", c.level));
    }
    if let Some(p) = &m.policy {
        cmd.push_str(&format!(" --idle-after {}", p.idle_age_s));
        if let Some((algo, level)) = &p.recompress {
            cmd.push_str(&format!(
                " --recomp-algorithm \"algo={algo} priority=1\" --auto-recompress"
            ));
            s.push_str(&format!(
                "# The secondary was measured at level {level}; --recomp-algorithm runs it at \
                 its default level.\n"
            ));
        }
        if let Some(dev) = &m.backing_dev {
            cmd.push_str(&format!(" --backing-dev {dev} --auto-writeback idle"));
            s.push_str(&format!(
                "# zmem serve has no daily writeback budget: the policy's {} MiB a day is \
                 zram's writeback_limit (zmem ctl writeback_limit {}).\n",
                mib(p.daily_budget_bytes),
                p.daily_budget_bytes / 4096
            ));
        }
    }
    s.push_str(&cmd);
    s.push('\n');
    s
}
