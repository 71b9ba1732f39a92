//! The binary run as `limitador-server` with Limitador's command line, as
//! limitador-operator's Deployment runs it: the limits file, the ports, the storage; its
//! `/status` probe, Limitador's HTTP calls and Envoy's RLS on the ports it named, with draft
//! 03's headers; `--validate`.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::*;

const LIMITS: &str = "\
- namespace: ns
  max_value: 2
  seconds: 60
  conditions: [\"descriptors[0]['method'] == 'GET'\"]
  variables: [\"descriptors[0]['user']\"]
  name: per-user
";

/// A `limitador-server` link to the sluice binary, in `dir`.
fn limitador_server(dir: &std::path::Path) -> std::path::PathBuf {
    let link = dir.join("limitador-server");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_sluice"), &link).expect("a link");
    link
}

#[tokio::test]
async fn limitador_servers_command_line_serves_its_ports_and_limits() {
    let dir = tempfile::tempdir().expect("a directory");
    let limits = dir.path().join("limits.yaml");
    std::fs::write(&limits, LIMITS).expect("written");
    let (grpc, http) = (redis::free_port(), redis::free_port());
    let mut child = Command::new(limitador_server(dir.path()))
        .args(["--rls-ip", "127.0.0.1", "--rls-port", &grpc.to_string()])
        .args([
            "--http-ip",
            "127.0.0.1",
            "--http-port",
            &http.to_string(),
            "-v",
        ])
        .args(["--rate-limit-headers", "DRAFT_VERSION_03"])
        .arg(&limits)
        .args(["memory", "--cache", "1000"])
        .stderr(Stdio::null())
        .spawn()
        .expect("started");
    let http_addr: std::net::SocketAddr = format!("127.0.0.1:{http}").parse().expect("address");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        let status = std::panic::catch_unwind(|| http_request(http_addr, "GET", "/status", ""));
        match status {
            Ok((200, body)) => break body,
            _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            other => {
                let _ = child.kill();
                panic!("no /status: {other:?}");
            }
        }
    };
    assert!(status.contains("\"config_version\":1"), "{status}");
    let body = r#"{"namespace":"ns","values":{"method":"GET","user":"a"},"delta":1}"#;
    let codes: Vec<u16> = (0..3)
        .map(|_| http_request(http_addr, "POST", "/check_and_report", body).0)
        .collect();
    // Envoy's RLS on the gRPC port counts the same limit.
    let mut client = Client::connect(format!("http://127.0.0.1:{grpc}"))
        .await
        .expect("the gRPC port");
    let response = call(
        &mut client,
        request("ns", vec![descriptor(&[("method", "GET"), ("user", "a")])]),
    )
    .await;
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(codes, [200, 200, 429]);
    assert_eq!(overall(&response), Code::OverLimit);
    // Draft 03's headers under Limitador's names, the limit's name in its policy.
    let header = |name: &str| {
        response
            .response_headers_to_add
            .iter()
            .find(|h| h.key == name)
            .map(|h| h.value.clone())
    };
    assert_eq!(
        header("X-RateLimit-Limit").as_deref(),
        Some("2, 2;w=60;name=\"per-user\"")
    );
    assert_eq!(header("X-RateLimit-Remaining").as_deref(), Some("0"));
    let reset: u64 = header("X-RateLimit-Reset")
        .and_then(|v| v.parse().ok())
        .expect("a reset");
    assert!(
        (59..=60).contains(&reset),
        "the window from the first hit: {reset} s"
    );
}

#[test]
fn validate_checks_the_limits_file_and_exits() {
    let dir = tempfile::tempdir().expect("a directory");
    let good = dir.path().join("good.yaml");
    std::fs::write(&good, LIMITS).expect("written");
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "- namespace: ns\n  max_value: 1\n  seconds: 1\n  variables: [\"descriptors[\"]\n",
    )
    .expect("written");
    let binary = limitador_server(dir.path());
    let passed = Command::new(&binary)
        .args(["--validate"])
        .arg(&good)
        .output()
        .expect("ran");
    assert!(passed.status.success(), "{passed:?}");
    let summary = String::from_utf8_lossy(&passed.stdout);
    let line = "Limitador's limit ns per-user: 2 per 60s, conditions [descriptors[0]['method'] == 'GET'], \
                variables [descriptors[0]['user']]";
    assert!(summary.contains(line), "{summary}");
    let refused = Command::new(&binary)
        .args(["--validate"])
        .arg(&bad)
        .output()
        .expect("ran");
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("bad.yaml:4:"), "{stderr}");
    let unhonoured = Command::new(&binary)
        .args(["--custom-metric-labels", "x"])
        .arg(&good)
        .output()
        .expect("ran");
    assert_eq!(unhonoured.status.code(), Some(2), "{unhonoured:?}");
}

/// `deploy/kuadrant`: the manifests validate, and the Deployment's own command, run on its
/// ConfigMap's limits file (ports and paths moved into a test directory, mounted as kubelet
/// mounts a ConfigMap), serves them, and serves the edited file once kubelet swaps it.
#[test]
fn the_kuadrant_deployment_validates_and_its_command_serves_its_configmap() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kuadrant");
    let manifests: Vec<std::path::PathBuf> = ["deployment.yaml", "configmap.yaml", "service.yaml"]
        .iter()
        .map(|name| root.join(name))
        .collect();
    crate::deploy::validate_manifests(&manifests);
    let yaml = |name: &str| -> serde_yaml::Value {
        serde_yaml::from_str(&std::fs::read_to_string(root.join(name)).expect("read"))
            .expect("YAML")
    };
    let (deployment, configmap) = (yaml("deployment.yaml"), yaml("configmap.yaml"));
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let command: Vec<String> = container["command"]
        .as_sequence()
        .expect("a command")
        .iter()
        .map(|part| part.as_str().expect("text").to_string())
        .collect();
    assert_eq!(command[0], "limitador-server");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/status");
    let mount = container["volumeMounts"][0]["mountPath"]
        .as_str()
        .expect("a mount");
    let dir = tempfile::tempdir().expect("a directory");
    let (file, text) = configmap["data"]
        .as_mapping()
        .and_then(|data| data.iter().next())
        .map(|(k, v)| {
            (
                k.as_str().unwrap_or("").to_string(),
                v.as_str().unwrap_or("").to_string(),
            )
        })
        .expect("the limits");
    // As kubelet mounts a ConfigMap: file -> ..data/file, ..data -> ..<timestamp>.
    let version = |name: &str, text: &str| {
        std::fs::create_dir(dir.path().join(name)).expect("a version");
        std::fs::write(dir.path().join(name).join(&file), text).expect("written");
    };
    version("..2026_12_06_00_00_00.1", &text);
    std::os::unix::fs::symlink("..2026_12_06_00_00_00.1", dir.path().join("..data"))
        .expect("..data");
    std::os::unix::fs::symlink(format!("..data/{file}"), dir.path().join(&file)).expect("the file");
    let http = redis::free_port();
    let args: Vec<String> = command[1..]
        .iter()
        .map(|arg| match arg.as_str() {
            "8080" => http.to_string(),
            "8081" => redis::free_port().to_string(),
            other => other.replace(mount, &dir.path().display().to_string()),
        })
        .collect();
    let mut child = Command::new(limitador_server(dir.path()))
        .args(&args)
        .stderr(Stdio::null())
        .spawn()
        .expect("started");
    let http_addr: std::net::SocketAddr = format!("127.0.0.1:{http}").parse().expect("address");
    let deadline = Instant::now() + Duration::from_secs(20);
    let limits = loop {
        match std::panic::catch_unwind(|| {
            http_request(http_addr, "GET", "/limits/toystore-app", "")
        }) {
            Ok((200, body)) => break body,
            _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            other => {
                let _ = child.kill();
                panic!("not served: {other:?}");
            }
        }
    };
    let status = http_request(http_addr, "GET", "/status", "").0;
    // The ConfigMap edited: kubelet swaps ..data to a new version.
    version(
        "..2026_12_06_00_01_00.2",
        &text.replace("app-wide", "app-wide-edited"),
    );
    std::os::unix::fs::symlink("..2026_12_06_00_01_00.2", dir.path().join("..data_tmp"))
        .expect("..data_tmp");
    std::fs::rename(dir.path().join("..data_tmp"), dir.path().join("..data")).expect("swapped");
    let deadline = Instant::now() + Duration::from_secs(20);
    let swapped = loop {
        let (_, now) = http_request(http_addr, "GET", "/limits/toystore-app", "");
        if now.contains("app-wide-edited") || Instant::now() > deadline {
            break now;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(status, 200);
    assert!(
        limits.contains("per-user-gets") && limits.contains("app-wide"),
        "{limits}"
    );
    assert!(
        swapped.contains("app-wide-edited"),
        "not reloaded: {swapped}"
    );
}
