//! The layer rule of docs/design.md, checked against `cargo metadata`.
//!
//! Every workspace package must appear in [`RULES`], and each of its normal
//! and build dependencies on another workspace package must be one its row
//! allows. A dev-dependency may name `zmem-testkit` or any package its normal
//! row allows, plus the ones listed as test-only. `zmem-testkit` is never a
//! normal dependency. Changing a dependency between zmem crates means changing
//! this table and the table in docs/design.md together.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// Every product crate (layers 0-4) and, last, the lab: what the CLI may
/// depend on.
const PRODUCT_AND_LAB: &[&str] = &[
    "zmem-pages",
    "zmem-ilist",
    "zmem-lzo",
    "zmem-nbd",
    "zmem-zpool",
    "zmem-zcomp",
    "zmem-zsmalloc",
    "zmem-zalloc",
    "zmem-zram",
    "zmem-capi",
    "zmem-serve",
    "zmem-lab",
];

/// Every product crate: what the lab may depend on.
const PRODUCT: &[&str] = PRODUCT_AND_LAB.split_at(PRODUCT_AND_LAB.len() - 1).0;

/// Package, the workspace packages it may depend on, and the ones its tests
/// may use beyond those.
const RULES: &[(&str, &[&str], &[&str])] = &[
    ("zmem-pages", &[], &[]),
    ("zmem-ilist", &[], &[]),
    ("zmem-lzo", &[], &[]),
    ("zmem-nbd", &[], &[]),
    ("zmem-zpool", &[], &[]),
    ("zmem-zcomp", &["zmem-lzo"], &[]),
    (
        "zmem-zsmalloc",
        &["zmem-pages", "zmem-zpool", "zmem-ilist"],
        &[],
    ),
    (
        "zmem-zalloc",
        &["zmem-pages", "zmem-zpool", "zmem-zsmalloc", "zmem-ilist"],
        &[],
    ),
    (
        "zmem-zram",
        &["zmem-pages", "zmem-zpool", "zmem-zcomp"],
        &["zmem-zsmalloc", "zmem-zalloc"],
    ),
    ("zmem-capi", &["zmem-zpool", "zmem-zsmalloc"], &[]),
    (
        "zmem-serve",
        &["zmem-nbd", "zmem-zpool", "zmem-zcomp", "zmem-zram"],
        &["zmem-zsmalloc", "zmem-zalloc", "zmem-pages"],
    ),
    ("zmem-lab", PRODUCT, &[]),
    ("zmem-cli", PRODUCT_AND_LAB, &[]),
    ("zmem-testkit", &[], &[]),
];

/// The stdout of `cargo ARGS` run at the workspace root, which must succeed
/// (the test fails with its stderr otherwise).
fn cargo(args: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(cargo)
        .args(args)
        .current_dir(&root)
        .output()
        .unwrap_or_else(|e| panic!("run cargo {args:?}: {e}"));
    assert!(
        out.status.success(),
        "cargo {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("cargo's stdout is UTF-8")
}

/// The workspace's packages and, for each, its dependencies on other
/// workspace packages by kind ("normal", "dev", "build").
fn workspace_edges() -> BTreeMap<String, Vec<(String, String)>> {
    let out = cargo(&[
        "metadata",
        "--format-version",
        "1",
        "--no-deps",
        "--offline",
    ]);
    let meta: Value = serde_json::from_str(&out).expect("cargo metadata is JSON");
    let packages = meta["packages"].as_array().expect("packages");
    let names: BTreeSet<String> = packages
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|d| {
                    let name = d["name"].as_str().unwrap();
                    let kind = d["kind"].as_str().unwrap_or("normal");
                    names
                        .contains(name)
                        .then(|| (name.to_string(), kind.to_string()))
                })
                .collect();
            (p["name"].as_str().unwrap().to_string(), deps)
        })
        .collect()
}

/// Every dependency the rule forbids, one line each.
fn violations(edges: &BTreeMap<String, Vec<(String, String)>>) -> Vec<String> {
    let rules: BTreeMap<&str, (&[&str], &[&str])> = RULES
        .iter()
        .map(|(name, allowed, tests)| (*name, (*allowed, *tests)))
        .collect();
    let mut bad = Vec::new();
    for (package, deps) in edges {
        let Some((allowed, tests)) = rules.get(package.as_str()) else {
            bad.push(format!(
                "{package}: not in the layer table (add it to docs/design.md and this test)"
            ));
            continue;
        };
        for (dep, kind) in deps {
            let ok = match kind.as_str() {
                "dev" => {
                    dep == "zmem-testkit"
                        || allowed.contains(&dep.as_str())
                        || tests.contains(&dep.as_str())
                }
                _ => dep != "zmem-testkit" && allowed.contains(&dep.as_str()),
            };
            if !ok {
                bad.push(format!(
                    "{package} -> {dep} ({kind}): forbidden by the layers"
                ));
            }
        }
    }
    bad
}

#[test]
fn workspace_follows_the_layer_rule() {
    let edges = workspace_edges();
    assert!(
        edges.contains_key("zmem-zsmalloc") && edges.contains_key("zmem-cli"),
        "cargo metadata did not list the workspace: {:?}",
        edges.keys()
    );
    let bad = violations(&edges);
    assert!(bad.is_empty(), "layer violations:\n{}", bad.join("\n"));
}

#[test]
fn the_product_build_has_no_plotting_or_font_crates() {
    // `zmem` without the lab's default feature: replay, classes, serve, ctl.
    let tree = |features: &[&str]| {
        let mut args = vec![
            "tree",
            "-p",
            "zmem-cli",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--offline",
        ];
        args.extend(features);
        cargo(&args)
    };
    let product = tree(&["--no-default-features"]);
    assert!(product.contains("zmem-serve"), "{product}");
    let heavy: Vec<&str> = product
        .lines()
        .filter(|l| l.starts_with("plotters") || l.contains("font"))
        .collect();
    assert!(heavy.is_empty(), "the product build links {heavy:?}");
    // The check can fail: the default build does have them.
    assert!(tree(&[]).lines().any(|l| l.starts_with("plotters")));
}

#[test]
fn the_rule_rejects_an_upward_edge_and_testkit_as_a_normal_dependency() {
    // The checker itself, on made-up edges: an allocator reaching up to the
    // lab, and testkit linked into a product crate.
    let mut edges = BTreeMap::new();
    edges.insert(
        "zmem-zsmalloc".to_string(),
        vec![
            ("zmem-pages".to_string(), "normal".to_string()),
            ("zmem-lab".to_string(), "normal".to_string()),
        ],
    );
    edges.insert(
        "zmem-nbd".to_string(),
        vec![
            ("zmem-testkit".to_string(), "normal".to_string()),
            ("zmem-testkit".to_string(), "dev".to_string()),
        ],
    );
    edges.insert("zmem-unknown".to_string(), vec![]);
    let bad = violations(&edges);
    assert_eq!(bad.len(), 3, "{bad:?}");
    assert!(
        bad[0].contains("zmem-nbd -> zmem-testkit (normal)"),
        "{bad:?}"
    );
    assert!(
        bad[1].contains("zmem-unknown: not in the layer table"),
        "{bad:?}"
    );
    assert!(
        bad[2].contains("zmem-zsmalloc -> zmem-lab (normal)"),
        "{bad:?}"
    );
}
