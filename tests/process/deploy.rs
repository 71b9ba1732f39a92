//! `deploy/` is copied by users as it is: every file must parse, the Kubernetes manifests must
//! validate, and everything they name (ports, health names, paths, variables, descriptors,
//! metrics) must be what the binary really uses.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::redis::RedisServer;
use crate::support::*;
use serde::Deserialize;
use serde_yaml::Value;

const LEASE_KEY: &str = sluice_core::lease::LEASE_KEY;
const SETTLE_KEY: &str = sluice_core::modifier::reserve::SETTLE_KEY;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(root().join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// Every YAML document of a file.
fn documents(relative: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(&read(relative))
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{relative}: {e}")))
        .collect()
}

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            yaml_files(&path, out);
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        ) {
            out.push(path);
        }
    }
}

/// Walks `value` by keys and sequence indexes written as numbers.
fn at<'a>(value: &'a Value, path: &[&str]) -> &'a Value {
    path.iter()
        .fold(value, |v, step| match step.parse::<usize>() {
            Ok(index) => &v[index],
            Err(_) => &v[*step],
        })
}

/// The HTTP connection manager of an Envoy bootstrap's first listener.
fn connection_manager(envoy: &Value) -> &Value {
    at(
        envoy,
        &[
            "static_resources",
            "listeners",
            "0",
            "filter_chains",
            "0",
            "filters",
            "0",
            "typed_config",
        ],
    )
}

/// The socket address of a cluster's first endpoint.
fn first_endpoint(cluster: &Value) -> &Value {
    at(
        cluster,
        &[
            "load_assignment",
            "endpoints",
            "0",
            "lb_endpoints",
            "0",
            "endpoint",
            "address",
            "socket_address",
        ],
    )
}

fn deployment() -> Value {
    documents("deploy/kubernetes/deployment.yaml").remove(0)
}

fn container_env(deployment: &Value) -> Vec<(String, String)> {
    at(
        deployment,
        &["spec", "template", "spec", "containers", "0", "env"],
    )
    .as_sequence()
    .expect("env")
    .iter()
    .map(|e| {
        (
            e["name"].as_str().unwrap().to_string(),
            e["value"].as_str().unwrap_or_default().to_string(),
        )
    })
    .collect()
}

fn env_value(deployment: &Value, name: &str) -> String {
    container_env(deployment)
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("{name} not set"))
}

#[test]
fn every_yaml_under_deploy_parses() {
    let mut files = Vec::new();
    yaml_files(&root().join("deploy"), &mut files);
    assert!(files.len() >= 9, "{files:?}");
    for file in files {
        let relative = file.strip_prefix(root()).unwrap().display().to_string();
        assert!(!documents(&relative).is_empty(), "{relative} is empty");
    }
    let dashboard: serde_json::Value =
        serde_json::from_str(&read("deploy/grafana/dashboard.json")).expect("dashboard JSON");
    assert!(dashboard["panels"]
        .as_array()
        .is_some_and(|p| !p.is_empty()));
}

#[test]
fn kubernetes_manifests_validate_against_the_schemas() {
    let kustomization = documents("deploy/kubernetes/kustomization.yaml").remove(0);
    let resources: Vec<String> = kustomization["resources"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect();
    // The base's own files (overlays live in directories of their own).
    let files: Vec<PathBuf> = std::fs::read_dir(root().join("deploy/kubernetes"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml"))
        .collect();
    let listed: BTreeSet<String> = resources.iter().cloned().collect();
    let present: BTreeSet<String> = files
        .iter()
        .map(|f| f.file_name().unwrap().to_str().unwrap().to_string())
        .filter(|name| name != "kustomization.yaml")
        .collect();
    assert_eq!(listed, present, "kustomization.yaml lists every manifest");
    let paths: Vec<PathBuf> = resources
        .iter()
        .map(|r| root().join("deploy/kubernetes").join(r))
        .collect();
    validate_manifests(&paths);
}

/// Runs kubernetes-validate (strict) on `paths`; panics with its report when one is refused.
pub(crate) fn validate_manifests(paths: &[PathBuf]) {
    let output = Command::new("python3")
        .args([
            "-m",
            "kubernetes_validate",
            "--strict",
            "--quiet",
            "--kubernetes-version",
            "1.30.0",
        ])
        .args(paths)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run python3 ({e}); scripts/test installs kubernetes-validate")
        });
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        !report.contains("No module named"),
        "pip install kubernetes-validate (scripts/test does): {report}"
    );
    assert!(output.status.success(), "{report}");
    assert!(!report.contains("ERROR"), "{report}");
}

#[test]
fn the_deployment_is_restrictive_and_drains() {
    let d = deployment();
    assert_eq!(d["spec"]["replicas"].as_u64(), Some(2));
    let pod = at(&d, &["spec", "template", "spec"]);
    assert_eq!(pod["securityContext"]["runAsNonRoot"].as_bool(), Some(true));
    let container = &pod["containers"][0];
    let security = &container["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"].as_bool(), Some(true));
    assert_eq!(security["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(security["capabilities"]["drop"][0].as_str(), Some("ALL"));
    assert!(
        container["resources"]["requests"].is_mapping()
            && container["resources"]["limits"].is_mapping()
    );
    let drain: u64 = env_value(&d, "SLUICE_SHUTDOWN_DRAIN_DELAY")
        .trim_end_matches('s')
        .parse()
        .unwrap();
    let grace: u64 = env_value(&d, "SLUICE_SHUTDOWN_GRACE")
        .trim_end_matches('s')
        .parse()
        .unwrap();
    let termination = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    assert!(
        termination > drain + grace,
        "Kubernetes must wait for the drain and the grace"
    );
}

#[tokio::test]
async fn manifests_name_the_ports_paths_variables_and_health_names_sluice_uses() {
    let d = deployment();
    // Every variable is one `sluice serve` reads.
    let help = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout).to_string();
    for (name, _) in container_env(&d) {
        assert!(
            // `[env: NAME=value]`, or `[env: NAME]` for one whose value may hold a secret.
            help.contains(&format!("[env: {name}=")) || help.contains(&format!("[env: {name}]")),
            "{name} is not a sluice variable"
        );
    }
    // Ports: the addresses sluice listens on, the container ports, probes, Service, scraping.
    let port_of = |addr: String| addr.rsplit(':').next().unwrap().parse::<u64>().unwrap();
    let grpc = port_of(env_value(&d, "SLUICE_GRPC_ADDR"));
    let http = port_of(env_value(&d, "SLUICE_HTTP_ADDR"));
    let container = at(&d, &["spec", "template", "spec", "containers", "0"]);
    let named = |name: &str| {
        container["ports"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|p| p["name"].as_str() == Some(name))
            .unwrap()["containerPort"]
            .as_u64()
            .unwrap()
    };
    assert_eq!((named("grpc"), named("http")), (grpc, http));
    assert_eq!(
        container["readinessProbe"]["grpc"]["port"].as_u64(),
        Some(grpc)
    );
    assert_eq!(
        container["livenessProbe"]["grpc"]["port"].as_u64(),
        Some(grpc)
    );
    let annotations = at(&d, &["spec", "template", "metadata", "annotations"]);
    assert_eq!(
        annotations["prometheus.io/port"].as_str(),
        Some(http.to_string().as_str())
    );
    assert_eq!(annotations["prometheus.io/path"].as_str(), Some("/metrics"));
    let service = documents("deploy/kubernetes/service.yaml").remove(0);
    let service_ports: Vec<(u64, String)> = service["spec"]["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["port"].as_u64().unwrap(),
                p["targetPort"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        service_ports,
        [(grpc, "grpc".to_string()), (http, "http".to_string())]
    );
    // The config is mounted where SLUICE_CONFIG points, from the ConfigMap.
    let mount = &container["volumeMounts"][0];
    assert_eq!(
        mount["mountPath"].as_str().unwrap(),
        env_value(&d, "SLUICE_CONFIG")
    );
    let volume = at(&d, &["spec", "template", "spec", "volumes", "0"]);
    assert_eq!(volume["name"], mount["name"]);
    assert_eq!(volume["configMap"]["name"].as_str(), Some("sluice-config"));
    // The probes' health names are answered SERVING by a running sluice.
    let sluice = Sluice::start(&read("config/config.yaml"), &[]);
    let mut health = tonic_health::pb::health_client::HealthClient::new(sluice.channel().await);
    for probe in ["readinessProbe", "livenessProbe"] {
        let name = container[probe]["grpc"]["service"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let status = health
            .check(tonic_health::pb::HealthCheckRequest {
                service: name.clone(),
            })
            .await;
        let status = status
            .unwrap_or_else(|e| panic!("{probe} {name:?}: {e}"))
            .into_inner()
            .status;
        assert_eq!(
            status,
            tonic_health::pb::health_check_response::ServingStatus::Serving as i32,
            "{probe}"
        );
    }
}

#[test]
fn the_configmap_holds_config_yaml_and_passes_check_config() {
    let configmap = documents("deploy/kubernetes/configmap.yaml").remove(0);
    let text = configmap["data"]["config.yaml"].as_str().unwrap();
    assert_eq!(
        text,
        read("config/config.yaml"),
        "the ConfigMap and config/config.yaml must not drift"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, text).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("check-config")
        .arg(&path)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
}

/// The descriptors a list of Envoy `rate_limits` produces, with sample request values.
fn descriptors_of(rate_limits: &Value) -> Vec<Vec<(String, String)>> {
    let sample_header = |header: &str| match header {
        "x-api-key" => "key-1",
        "x-plan" => "free",
        ":path" => "/api/v1/users",
        other => panic!("no sample value for header {other}"),
    };
    rate_limits
        .as_sequence()
        .expect("rate_limits")
        .iter()
        .map(|limit| {
            limit["actions"]
                .as_sequence()
                .unwrap()
                .iter()
                .map(|action| {
                    if action.get("remote_address").is_some() {
                        ("remote_address".to_string(), "192.0.2.7".to_string())
                    } else if let Some(headers) = action.get("request_headers") {
                        let key = headers["descriptor_key"].as_str().unwrap().to_string();
                        (
                            key,
                            sample_header(headers["header_name"].as_str().unwrap()).to_string(),
                        )
                    } else if let Some(metadata) = action.get("metadata") {
                        // The lease's or the hold's token sluice put in the filter's dynamic
                        // metadata, sent back under the same name.
                        let key = &metadata["metadata_key"];
                        assert_eq!(key["key"].as_str(), Some("envoy.filters.http.ratelimit"));
                        let descriptor_key = metadata["descriptor_key"].as_str().unwrap();
                        assert!([LEASE_KEY, SETTLE_KEY].contains(&descriptor_key));
                        assert_eq!(key["path"][0]["key"].as_str(), Some(descriptor_key));
                        assert_eq!(metadata["source"].as_str(), Some("DYNAMIC"));
                        (descriptor_key.to_string(), "00000000000000ab".to_string())
                    } else if let Some(generic) = action.get("generic_key") {
                        let key = generic
                            .get("descriptor_key")
                            .and_then(Value::as_str)
                            .unwrap_or("generic_key");
                        (
                            key.to_string(),
                            generic["descriptor_value"].as_str().unwrap().to_string(),
                        )
                    } else {
                        panic!("an action the test cannot sample: {action:?}")
                    }
                })
                .collect()
        })
        .collect()
}

fn assert_limited(domain: &str, descriptors: &[Vec<(String, String)>], source: &str) {
    let config =
        sluice_config::load(&[root().join("config")], Default::default()).expect("config/ loads");
    let domain = config
        .domain(domain)
        .unwrap_or_else(|| panic!("{source}: domain {domain} not in config/"));
    assert!(!descriptors.is_empty(), "{source}");
    for descriptor in descriptors {
        // A release's or a settle's token is set aside before matching, as sluice does.
        let entries: Vec<(&str, &str)> = descriptor
            .iter()
            .filter(|(k, _)| k != LEASE_KEY && k != SETTLE_KEY)
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert!(
            domain.resolve(entries.into_iter()).is_some(),
            "{source}: no limit for {descriptor:?}"
        );
    }
}

/// The route of deploy/envoy/envoy.yaml (`envoy`, its document) that matches `prefix`.
fn envoy_route<'a>(envoy: &'a Value, prefix: &str) -> &'a Value {
    let host = &connection_manager(envoy)["route_config"]["virtual_hosts"][0];
    host["routes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|route| route["match"]["prefix"].as_str() == Some(prefix))
        .unwrap_or_else(|| panic!("no route for {prefix}"))
}

/// The chat route of deploy/envoy/envoy.yaml acquires a lease per request and releases it
/// with the token when the stream ends: the same descriptor, plus the token.
#[test]
fn the_envoy_example_releases_the_lease_it_acquired_when_the_stream_ends() {
    let envoy = documents("deploy/envoy/envoy.yaml").remove(0);
    let chat = envoy_route(&envoy, "/v1/chat");
    let policies = &chat["route"]["rate_limits"];
    let [acquire, release] = &descriptors_of(policies)[..] else {
        panic!("two policies: acquire and release");
    };
    assert_eq!(policies[0].get("apply_on_stream_done"), None);
    assert_eq!(policies[1]["apply_on_stream_done"].as_bool(), Some(true));
    assert_eq!(&release[..release.len() - 1], &acquire[..]);
    assert_eq!(release.last().map(|(k, _)| k.as_str()), Some(LEASE_KEY));
    let config =
        sluice_config::load(&[root().join("config")], Default::default()).expect("config/ loads");
    let domain = config.domain("edge_proxy").expect("edge_proxy");
    let entries = acquire.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    let rule = domain.resolve(entries).expect("a rule").rule;
    let algorithms: Vec<_> = rule
        .limits
        .iter()
        .filter_map(|l| l.limit.clone())
        .map(|l| l.algorithm())
        .collect();
    assert!(
        algorithms.contains(&sluice_core::limit::Algorithm::Concurrency),
        "{algorithms:?}"
    );
}

/// The completions route of deploy/envoy/envoy.yaml holds a token budget's estimate when
/// the request starts and settles at stream end with the tokens Envoy AI Gateway recorded;
/// the two calls, as Envoy sends them, against config/ on the memory store.
#[tokio::test]
async fn the_envoy_example_reserves_at_the_request_and_settles_the_tokens_at_stream_end() {
    let envoy = documents("deploy/envoy/envoy.yaml").remove(0);
    let completions = envoy_route(&envoy, "/v1/completions");
    let policies = &completions["route"]["rate_limits"];
    let [reserve, settle] = &descriptors_of(policies)[..] else {
        panic!("two policies: reserve and settle");
    };
    assert_eq!(policies[0].get("apply_on_stream_done"), None);
    assert_eq!(policies[0]["hits_addend"]["number"].as_u64(), Some(0));
    assert_eq!(policies[1]["apply_on_stream_done"].as_bool(), Some(true));
    assert_eq!(
        policies[1]["hits_addend"]["format"].as_str(),
        Some("%DYNAMIC_METADATA(io.envoy.ai_gateway:llm_total_token)%")
    );
    assert_eq!(&settle[..settle.len() - 1], &reserve[..]);
    assert_eq!(settle.last().map(|(k, _)| k.as_str()), Some(SETTLE_KEY));

    let config = read("config/config.yaml");
    let sluice = Sluice::start(&config, &[]);
    let mut client = sluice.client().await;
    let entries: Vec<(&str, &str)> = reserve
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let opened = call(
        &mut client,
        request("edge_proxy", vec![descriptor_with_hits(&entries, 0)]),
    )
    .await;
    assert_eq!(overall(&opened), Code::Ok);
    assert_eq!(opened.statuses[0].limit_remaining, 2_000_000 - 4_000);
    let token = metadata_text(&opened, SETTLE_KEY).expect("a hold's token");
    let mut settling = entries.clone();
    settling.push((SETTLE_KEY, &token));
    // The response used 1,234 tokens.
    let settled = call(
        &mut client,
        request("edge_proxy", vec![descriptor_with_hits(&settling, 1_234)]),
    )
    .await;
    assert_eq!(overall(&settled), Code::Ok);
    assert_eq!(settled.statuses[0].limit_remaining, 2_000_000 - 1_234);
}

/// The login route of deploy/envoy/envoy.yaml falls under a limit with a penalty.
#[test]
fn the_envoy_example_blocks_a_client_that_keeps_failing_its_login() {
    let envoy = documents("deploy/envoy/envoy.yaml").remove(0);
    let login = envoy_route(&envoy, "/login");
    let [descriptor] = &descriptors_of(&login["route"]["rate_limits"])[..] else {
        panic!("one policy");
    };
    let config =
        sluice_config::load(&[root().join("config")], Default::default()).expect("config/ loads");
    let domain = config.domain("edge_proxy").expect("edge_proxy");
    let entries = descriptor.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    let rule = domain.resolve(entries).expect("a rule").rule;
    let penalty = rule.limits[0]
        .limit
        .as_ref()
        .and_then(|l| l.modifiers.penalty)
        .expect("a penalty");
    assert_eq!((penalty.after, penalty.block_ms), (3, 60_000));
}

#[test]
fn envoy_and_istio_descriptors_are_limited_by_the_config() {
    let envoy = documents("deploy/envoy/envoy.yaml").remove(0);
    let hcm = connection_manager(&envoy);
    let filter = &hcm["http_filters"][0]["typed_config"];
    let domain = filter["domain"].as_str().unwrap();
    assert_eq!(
        filter["rate_limit_service"]["grpc_service"]["envoy_grpc"]["cluster_name"].as_str(),
        Some("sluice")
    );
    let host = &hcm["route_config"]["virtual_hosts"][0];
    let mut descriptors = descriptors_of(&host["rate_limits"]);
    for route in host["routes"].as_sequence().unwrap() {
        if let Some(limits) = route["route"].get("rate_limits") {
            descriptors.extend(descriptors_of(limits));
        }
    }
    assert_limited(domain, &descriptors, "deploy/envoy/envoy.yaml");
    // The sluice cluster speaks HTTP/2 to the gRPC port.
    let address = first_endpoint(at(&envoy, &["static_resources", "clusters", "0"]));
    assert_eq!(address["port_value"].as_u64(), Some(8081));
    let istio = documents("deploy/istio/envoyfilter.yaml");
    let istio_filter = at(
        &istio[0],
        &[
            "spec",
            "configPatches",
            "0",
            "patch",
            "value",
            "typed_config",
        ],
    );
    let istio_domain = istio_filter["domain"].as_str().unwrap();
    let cluster = istio_filter["rate_limit_service"]["grpc_service"]["envoy_grpc"]["cluster_name"]
        .as_str()
        .unwrap();
    assert!(cluster.starts_with("outbound|8081||sluice."), "{cluster}");
    let istio_limits = at(
        &istio[1],
        &[
            "spec",
            "configPatches",
            "0",
            "patch",
            "value",
            "rate_limits",
        ],
    );
    assert_limited(
        istio_domain,
        &descriptors_of(istio_limits),
        "deploy/istio/envoyfilter.yaml",
    );
}

/// Metric names in the dashboard's queries.
fn dashboard_metrics() -> BTreeSet<String> {
    let dashboard: serde_json::Value =
        serde_json::from_str(&read("deploy/grafana/dashboard.json")).unwrap();
    let mut names = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if word.starts_with("ratelimit_") || word.starts_with("sluice_") {
                    names.insert(word.to_string());
                }
            }
        }
    }
    names
}

#[tokio::test]
async fn the_dashboard_queries_only_metrics_sluice_exports() {
    let mut redis = RedisServer::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        root().join("config/config.yaml"),
        dir.path().join("config.yaml"),
    )
    .unwrap();
    let url = redis.url();
    let config = dir.path().display().to_string();
    let sluice = Sluice::process_with(
        &[],
        &[
            "--config",
            &config,
            "--store",
            "redis",
            "--redis-url",
            &url,
            "--redis-command-timeout",
            "300ms",
            // The heavy hitters' series are exported only when asked for.
            "--heavy-hitters-metrics",
            // The regions' series only when the replica takes part in global limits.
            "--region",
            "a",
            "--global-home-redis-url",
            &url,
        ],
        &[("LOCAL_CACHE_SIZE_IN_BYTES", "65536")],
    );
    let mut client = sluice.client().await;
    // Traffic that makes every kind of series appear: near and over limit, shadow mode, a
    // local cache hit, a NOSCRIPT reload, a store error, a refused reload.
    for _ in 0..12 {
        call_one(&mut client, "edge_proxy", &[("login", "u")]).await;
        call(
            &mut client,
            request(
                "edge_proxy",
                vec![descriptor(&[("header_match", "beta_clients")])],
            ),
        )
        .await;
    }
    redis.cli(&["SCRIPT", "FLUSH"]);
    call(
        &mut client,
        request(
            "edge_proxy",
            vec![descriptor(&[("remote_address", "192.0.2.9")])],
        ),
    )
    .await;
    std::fs::write(
        dir.path().join("broken.yaml"),
        "domain: x\ndescriptors:\n  - nokey: 1\n",
    )
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !sluice.log().contains("config refused") {
        assert!(
            std::time::Instant::now() < deadline,
            "the broken file was not noticed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    redis.stop();
    let _ = client
        .should_rate_limit(request(
            "edge_proxy",
            vec![descriptor(&[("remote_address", "192.0.2.9")])],
        ))
        .await;
    let (_, mut text) = sluice.http_get("/metrics");
    // The memory store's own series come from a sluice on the memory store.
    let memory = Sluice::process(&read("config/config.yaml"), &[]);
    let mut memory_client = memory.client().await;
    call_one(&mut memory_client, "edge_proxy", &[("login", "u")]).await;
    text.push_str(&memory.http_get("/metrics").1);
    // The span counters come from a sluice with tracing on (towards a collector that is not
    // there).
    let traced = Sluice::process_with(
        &[("config.yaml", &read("config/config.yaml"))],
        &[],
        &[
            ("TRACING_ENABLED", "true"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9"),
        ],
    );
    text.push_str(&traced.http_get("/metrics").1);
    let exported: BTreeSet<String> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap().to_string())
        .collect();
    let queried = dashboard_metrics();
    assert!(queried.len() >= 12, "{queried:?}");
    let missing: Vec<&String> = queried
        .iter()
        .filter(|name| !exported.contains(*name))
        .collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries metrics /metrics does not export: {missing:?}\n{text}"
    );
}

#[test]
fn the_dockerfile_builds_with_the_readme_command() {
    let command = "cargo build --profile dist --locked";
    let dockerfile = read("deploy/docker/Dockerfile");
    assert!(
        dockerfile
            .lines()
            .any(|l| l.trim() == format!("RUN {command}")),
        "{dockerfile}"
    );
    assert!(
        read("README.md").contains(command),
        "the README shows the same build"
    );
    assert!(dockerfile.contains("USER 65532"), "runs as non-root");
    assert!(dockerfile.contains("EXPOSE 8080 8081"));
    assert!(dockerfile.contains(r#"ENTRYPOINT ["/usr/local/bin/sluice", "serve"]"#));
    assert!(
        dockerfile.contains("/bin/ratelimit"),
        "Envoy Gateway's command"
    );
    let compose = documents("deploy/compose/docker-compose.yaml").remove(0);
    let build = &compose["services"]["sluice"]["build"];
    let context = root()
        .join("deploy/compose")
        .join(build["context"].as_str().unwrap());
    assert!(context.join(build["dockerfile"].as_str().unwrap()).exists());
    let envoy_volume = compose["services"]["envoy"]["volumes"][0].as_str().unwrap();
    let envoy_file = envoy_volume.split(':').next().unwrap();
    assert!(
        root().join("deploy/compose").join(envoy_file).exists(),
        "{envoy_file}"
    );
}

#[test]
fn the_binary_run_as_bin_ratelimit_with_the_references_variables_serves() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("ratelimit/config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("limits.yaml"),
        "domain: eg\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    )
    .unwrap();
    let ratelimit = dir.path().join("ratelimit-bin");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_sluice"), &ratelimit).unwrap();
    let (grpc, http) = (
        crate::support::redis::free_port(),
        crate::support::redis::free_port(),
    );
    // As Envoy Gateway's Deployment runs it: a command and the reference's variables only.
    let mut child = Command::new(&ratelimit)
        .env("RUNTIME_ROOT", dir.path())
        .env("RUNTIME_SUBDIRECTORY", "ratelimit")
        .env("GRPC_HOST", "127.0.0.1")
        .env("GRPC_PORT", grpc.to_string())
        .env("HOST", "127.0.0.1")
        .env("PORT", http.to_string())
        .env("USE_STATSD", "false")
        .env("LOG_LEVEL", "info")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let listening = BufReader::new(stderr)
        .lines()
        .map_while(Result::ok)
        .take(20)
        .any(|line| line.contains("sluice listening"));
    let healthy = listening
        && crate::support::http_request(
            format!("127.0.0.1:{http}").parse().unwrap(),
            "GET",
            "/healthcheck",
            "",
        )
        .0 == 200;
    let _ = child.kill();
    let _ = child.wait();
    assert!(healthy, "ratelimit did not serve");
}

/// The variables Envoy Gateway's rate limit Deployment sets on the reference's container.
const ENVOY_GATEWAY_VARIABLES: [&str; 16] = [
    "CONFIG_TYPE",
    "CONFIG_GRPC_XDS_SERVER_URL",
    "CONFIG_GRPC_XDS_NODE_ID",
    "CONFIG_GRPC_XDS_SERVER_USE_TLS",
    "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
    "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
    "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
    "FORCE_START_WITHOUT_INITIAL_CONFIG",
    "GRPC_SERVER_USE_TLS",
    "GRPC_SERVER_TLS_CERT",
    "GRPC_SERVER_TLS_KEY",
    "GRPC_CLIENT_TLS_CACERT",
    "REDIS_TLS_CLIENT_CERT",
    "REDIS_TLS_CLIENT_KEY",
    "USE_PROMETHEUS",
    "PROMETHEUS_ADDR",
];

#[test]
fn envoy_gateway_runs_sluice_with_the_references_contract() {
    let config = documents("deploy/envoy-gateway/envoy-gateway-config.yaml").remove(0);
    assert_eq!(config["kind"], "ConfigMap");
    let embedded: Value =
        serde_yaml::from_str(config["data"]["envoy-gateway.yaml"].as_str().unwrap()).unwrap();
    assert_eq!(embedded["kind"], "EnvoyGateway");
    let container = &embedded["provider"]["kubernetes"]["rateLimitDeployment"]["container"];
    assert!(container["image"].as_str().unwrap().contains("sluice"));
    assert_eq!(embedded["rateLimit"]["backend"]["type"], "Redis");
    assert!(embedded["rateLimit"]["backend"]["redis"]["url"]
        .as_str()
        .is_some());
    let policy = documents("deploy/envoy-gateway/backend-traffic-policy.yaml").remove(0);
    assert_eq!(policy["kind"], "BackendTrafficPolicy");
    assert_eq!(policy["spec"]["rateLimit"]["type"], "Global");
    // Every variable of the contract is one sluice serve reads (USE_STATSD=false it reports as
    // not applicable).
    let help = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout).to_string();
    for name in ENVOY_GATEWAY_VARIABLES {
        assert!(
            help.contains(&format!("[env: {name}=")) || help.contains(&format!("[env: {name}]")),
            "{name} is not read by sluice"
        );
    }
    assert!(read("docs/deploying.md").contains("## Envoy Gateway"));
}

#[test]
fn the_rate_limit_quota_example_streams_to_sluice_and_its_buckets_are_limited() {
    let envoy = documents("deploy/envoy/rate-limit-quota.yaml").remove(0);
    let hcm = connection_manager(&envoy);
    let filter = &hcm["http_filters"][0];
    assert_eq!(
        filter["name"].as_str(),
        Some("envoy.filters.http.rate_limit_quota")
    );
    let config = &filter["typed_config"];
    assert_eq!(
        config["@type"].as_str(),
        Some("type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig")
    );
    assert_eq!(
        config["rlqs_server"]["envoy_grpc"]["cluster_name"].as_str(),
        Some("sluice")
    );
    let domain = config["domain"].as_str().expect("a domain");
    let limits =
        sluice_config::load(&[root().join("config")], Default::default()).expect("config/ loads");
    let matchers = config["bucket_matchers"]["matcher_list"]["matchers"]
        .as_sequence()
        .expect("matchers");
    assert!(!matchers.is_empty());
    for matcher in matchers {
        let settings = &matcher["on_match"]["action"]["typed_config"];
        assert_eq!(
            settings["@type"].as_str(),
            Some("type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings")
        );
        assert!(settings["reporting_interval"].as_str().is_some());
        let builder = settings["bucket_id_builder"]["bucket_id_builder"]
            .as_mapping()
            .expect("a bucket id builder");
        let pairs: Vec<(String, String)> = builder
            .iter()
            .map(|(k, v)| {
                let value = v["string_value"].as_str().expect("a fixed value");
                (k.as_str().unwrap().to_string(), value.to_string())
            })
            .collect();
        let resolved = sluice_server::rlqs::bucket::resolve(&limits, domain, &pairs);
        assert!(
            matches!(
                resolved,
                sluice_server::rlqs::bucket::Resolved::Limited { .. }
            ),
            "{pairs:?} is not limited in config/: {resolved:?}"
        );
    }
    // The sluice cluster speaks HTTP/2 to the gRPC port.
    let cluster = at(&envoy, &["static_resources", "clusters", "0"]);
    assert_eq!(cluster["name"].as_str(), Some("sluice"));
    assert!(!cluster["typed_extension_protocol_options"].is_null());
    let address = first_endpoint(cluster);
    assert_eq!(address["port_value"].as_u64(), Some(8081));
}

/// The items of the sequence at `key` of `patch`, appended to the one of `base` (a strategic
/// merge of lists keyed by name, where every item of the patch is new).
fn append(base: &mut Value, patch: &Value, key: &str) {
    let added = patch[key].as_sequence().cloned().unwrap_or_default();
    match base.get_mut(key).and_then(Value::as_sequence_mut) {
        Some(items) => items.extend(added),
        None => {
            base[key] = Value::Sequence(added);
        }
    }
}

#[test]
fn the_admin_overlay_serves_the_admin_api_behind_mtls_and_validates() {
    let kustomization = documents("deploy/kubernetes/admin/kustomization.yaml").remove(0);
    let resources: Vec<&str> = kustomization["resources"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(resources, ["..", "service.yaml", "networkpolicy.yaml"]);
    assert_eq!(
        kustomization["patches"][0]["path"].as_str(),
        Some("deployment-patch.yaml")
    );
    // The base Deployment with the patch merged, as kustomize would.
    let patch = documents("deploy/kubernetes/admin/deployment-patch.yaml").remove(0);
    let patched = &patch["spec"]["template"]["spec"];
    let mut merged = deployment();
    {
        let pod = &mut merged["spec"]["template"]["spec"];
        append(pod, patched, "volumes");
        let container = &mut pod["containers"][0];
        assert_eq!(container["name"].as_str(), Some("sluice"));
        for key in ["ports", "env", "volumeMounts"] {
            append(container, &patched["containers"][0], key);
        }
    }
    let env = container_env(&merged);
    let value = |name: &str| {
        env.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("{name} is not set"))
    };
    // mTLS with an allowed subject: a port sluice agrees to open.
    let mount = at(
        &merged,
        &[
            "spec",
            "template",
            "spec",
            "containers",
            "0",
            "volumeMounts",
        ],
    )
    .as_sequence()
    .unwrap()
    .iter()
    .find(|m| m["name"].as_str() == Some("admin-tls"))
    .and_then(|m| m["mountPath"].as_str())
    .expect("the admin certificates are mounted")
    .to_string();
    for name in [
        "SLUICE_ADMIN_TLS_CERT",
        "SLUICE_ADMIN_TLS_KEY",
        "SLUICE_ADMIN_TLS_CLIENT_CA",
    ] {
        assert!(value(name).starts_with(&mount), "{name} is under {mount}");
    }
    assert!(!value("SLUICE_ADMIN_ALLOWED_SUBJECTS").is_empty());
    assert!(value("SLUICE_ADMIN_ADDR").ends_with(":8082"));
    let help = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["serve", "--help"])
        .output()
        .expect("sluice serve --help");
    let help = String::from_utf8_lossy(&help.stdout);
    for (name, _) in env.iter().filter(|(n, _)| n.starts_with("SLUICE_ADMIN")) {
        assert!(
            help.contains(&format!("env: {name}=")),
            "sluice reads no {name}"
        );
    }
    let service = documents("deploy/kubernetes/admin/service.yaml").remove(0);
    assert_eq!(
        service["spec"]["ports"][0]["targetPort"].as_str(),
        Some("admin")
    );
    let policy = documents("deploy/kubernetes/admin/networkpolicy.yaml").remove(0);
    let admin_rule = &policy["spec"]["ingress"][1];
    assert_eq!(admin_rule["ports"][0]["port"].as_u64(), Some(8082));
    assert!(admin_rule["from"]
        .as_sequence()
        .is_some_and(|f| !f.is_empty()));
    let dir = tempfile::tempdir().expect("a directory");
    let merged_path = dir.path().join("deployment.yaml");
    std::fs::write(&merged_path, serde_yaml::to_string(&merged).unwrap()).unwrap();
    validate_manifests(&[
        merged_path,
        root().join("deploy/kubernetes/admin/service.yaml"),
        root().join("deploy/kubernetes/admin/networkpolicy.yaml"),
    ]);
}
