//! The layer rule of docs/design.md, checked against `cargo metadata`.
//!
//! Every workspace package must appear in [`RULES`], and each of its normal
//! and build dependencies on another workspace package must be one its row
//! allows. A dev-dependency may name `zmem-testkit` or any package its normal
//! row allows, plus the ones listed as test-only. `zmem-testkit` is never a
//! normal dependency. The dependencies in [`OPTIONAL_ONLY`] must be optional
//! and turned on by their feature only: the CLI links the lab under its `lab`
//! feature. Changing a dependency between zmem crates means changing this
//! table and the table in docs/design.md together.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use testkit::workspace::{cargo, metadata};

/// Every product crate (layers 0-5, and the region's C library at 6) and,
/// last, the lab: what the CLI may depend on.
const PRODUCT_AND_LAB: &[&str] = &[
    "zmem-pages",
    "zmem-ilist",
    "zmem-lzo",
    "zmem-lz4",
    "zmem-nbd",
    "zmem-ublk",
    "zmem-zpool",
    "zmem-zcomp",
    "zmem-zsmalloc",
    "zmem-zalloc",
    "zmem-zram",
    "zmem-zswap",
    "zmem-capi",
    "zmem-recipe",
    "zmem-serve",
    "zmem-tune",
    "zmem-region",
    "zmem-region-capi",
    "zmem-lab",
];

/// Every product crate: what the lab may depend on.
const PRODUCT: &[&str] = PRODUCT_AND_LAB.split_at(PRODUCT_AND_LAB.len() - 1).0;

/// What the region may depend on: the store and what is below it.
const REGION_DEPS: &[&str] = REGION_AND_BELOW.split_at(REGION_AND_BELOW.len() - 1).0;

/// The region and what it may depend on: what its C library and the preload
/// library of `zmem run` (layer 6) may depend on.
const REGION_AND_BELOW: &[&str] = &[
    "zmem-pages",
    "zmem-zpool",
    "zmem-zcomp",
    "zmem-zsmalloc",
    "zmem-zalloc",
    "zmem-zram",
    "zmem-recipe",
    "zmem-region",
];

/// Package, the workspace packages it may depend on, and the ones its tests
/// may use beyond those.
const RULES: &[(&str, &[&str], &[&str])] = &[
    ("zmem-pages", &[], &[]),
    ("zmem-ilist", &[], &[]),
    ("zmem-lzo", &[], &[]),
    ("zmem-lz4", &[], &[]),
    ("zmem-nbd", &[], &[]),
    ("zmem-ublk", &[], &[]),
    ("zmem-zpool", &[], &[]),
    ("zmem-zcomp", &["zmem-lzo", "zmem-lz4"], &[]),
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
    ("zmem-zswap", &["zmem-zcomp", "zmem-zsmalloc"], &[]),
    ("zmem-capi", &["zmem-zpool", "zmem-zsmalloc"], &[]),
    (
        "zmem-recipe",
        &[
            "zmem-zpool",
            "zmem-zsmalloc",
            "zmem-zalloc",
            "zmem-zcomp",
            "zmem-zram",
        ],
        &[],
    ),
    (
        "zmem-tune",
        &[
            "zmem-zsmalloc",
            "zmem-zalloc",
            "zmem-zcomp",
            "zmem-zram",
            "zmem-zswap",
            "zmem-recipe",
        ],
        &[],
    ),
    (
        "zmem-serve",
        &[
            "zmem-pages",
            "zmem-nbd",
            "zmem-zpool",
            "zmem-zcomp",
            "zmem-zram",
            "zmem-recipe",
            "zmem-ublk",
        ],
        &["zmem-zsmalloc", "zmem-zalloc"],
    ),
    ("zmem-region", REGION_DEPS, &[]),
    // Layer 6.
    ("zmem-region-capi", REGION_AND_BELOW, &[]),
    // Layer 6. Nothing may depend on it (it is in no list above): linking
    // it would replace the linking program's malloc with its hooks.
    ("zmem-preload", REGION_AND_BELOW, &[]),
    ("zmem-lab", PRODUCT, &[]),
    ("zmem-cli", PRODUCT_AND_LAB, &[]),
    ("zmem-testkit", &[], &[]),
];

/// Package, dependency and feature: the package may depend on it only
/// optionally, with that feature turning it on (`dep:NAME`).
const OPTIONAL_ONLY: &[(&str, &str, &str)] = &[("zmem-cli", "zmem-lab", "lab")];

/// Every breach of [`OPTIONAL_ONLY`] in `meta` (`cargo metadata`'s
/// output), one line each: a dependency that is not optional, or that its
/// feature does not turn on, or that another feature does.
fn optional_violations(meta: &Value) -> Vec<String> {
    let mut bad = Vec::new();
    for (package, dep, feature) in OPTIONAL_ONLY {
        let Some(p) = meta["packages"]
            .as_array()
            .expect("packages")
            .iter()
            .find(|p| p["name"] == *package)
        else {
            bad.push(format!("{package}: not in the workspace"));
            continue;
        };
        for d in p["dependencies"].as_array().expect("dependencies") {
            let kind = d["kind"].as_str().unwrap_or("normal");
            if d["name"] != *dep || kind == "dev" {
                continue;
            }
            if d["optional"] != true {
                bad.push(format!(
                    "{package} -> {dep} ({kind}): must be optional (feature {feature})"
                ));
            }
        }
        let turn_on = format!("dep:{dep}");
        let features = p["features"].as_object().expect("features");
        let on = |f: &str| {
            features
                .get(f)
                .and_then(Value::as_array)
                .is_some_and(|v| v.iter().any(|x| x.as_str() == Some(turn_on.as_str())))
        };
        if !on(feature) {
            bad.push(format!(
                "{package}: feature {feature} does not turn on {turn_on}"
            ));
        }
        for (name, _) in features {
            if name != feature && on(name) {
                bad.push(format!(
                    "{package}: feature {name} turns on {turn_on} (only {feature} may)"
                ));
            }
        }
    }
    bad
}

/// The workspace's packages and, for each, its dependencies on other
/// workspace packages by kind ("normal", "dev", "build").
fn workspace_edges() -> BTreeMap<String, Vec<(String, String)>> {
    let meta = metadata();
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
fn the_cli_links_the_lab_only_under_its_feature() {
    let bad = optional_violations(&metadata());
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn the_optional_rule_rejects_a_lab_the_cli_always_links() {
    let meta = serde_json::json!({
        "packages": [{
            "name": "zmem-cli",
            "dependencies": [
                {"name": "zmem-lab", "kind": null, "optional": false},
                {"name": "zmem-lab", "kind": "dev", "optional": false},
            ],
            "features": {"default": ["dep:zmem-lab"], "lab": []},
        }]
    });
    let bad = optional_violations(&meta);
    assert_eq!(bad.len(), 3, "{bad:?}");
    assert!(bad[0].contains("must be optional"), "{bad:?}");
    assert!(
        bad[1].contains("feature lab does not turn on dep:zmem-lab"),
        "{bad:?}"
    );
    assert!(bad[2].contains("feature default turns on"), "{bad:?}");
}

#[test]
fn the_product_build_has_no_plotting_or_font_crates() {
    // `zmem` without the lab's default feature: replay, advise, classes,
    // serve, ctl, run.
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
    assert!(product.contains("zmem-tune"), "{product}");
    assert!(
        !product.lines().any(|l| l.starts_with("zmem-lab")),
        "the product build links the lab: {product}"
    );
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
