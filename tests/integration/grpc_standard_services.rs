//! The standard gRPC services beside the RLS: health (for `""`, `ratelimit`, the RLS and the
//! RLQS names) and reflection (v1 and v1alpha), so grpcurl and Kubernetes probes need no proto
//! files.

use crate::support::Sluice;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

const CONFIG: &str =
    "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
const RLS: &str = "envoy.service.ratelimit.v3.RateLimitService";
const RLQS: &str = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService";

#[tokio::test]
async fn health_reports_serving_for_every_name() {
    let sluice = Sluice::start(CONFIG, &[]);
    let mut health = HealthClient::new(sluice.channel().await);
    for service in ["", "ratelimit", RLS, RLQS] {
        let response = health
            .check(HealthCheckRequest {
                service: service.to_string(),
            })
            .await
            .unwrap_or_else(|e| panic!("health of {service:?}: {e}"))
            .into_inner();
        assert_eq!(
            response.status,
            ServingStatus::Serving as i32,
            "{service:?}"
        );
    }
    let unknown = health
        .check(HealthCheckRequest {
            service: "no.such.Service".into(),
        })
        .await;
    assert_eq!(unknown.unwrap_err().code(), tonic::Code::NotFound);
}

#[tokio::test]
async fn reflection_v1_lists_services_and_describes_the_rls() {
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1::ServerReflectionRequest;

    let sluice = Sluice::start(CONFIG, &[]);
    let mut client = ServerReflectionClient::new(sluice.channel().await);
    let requests = vec![
        ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        },
        ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::FileContainingSymbol(RLS.into())),
        },
    ];
    let mut responses = client
        .server_reflection_info(tokio_stream::iter(requests))
        .await
        .expect("reflection answers")
        .into_inner();
    let listed = responses.message().await.unwrap().unwrap().message_response;
    let Some(MessageResponse::ListServicesResponse(list)) = listed else {
        panic!("expected a service list, got {listed:?}");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(names.iter().any(|n| n == RLS), "{names:?}");
    assert!(
        names.iter().any(|n| n == "grpc.health.v1.Health"),
        "{names:?}"
    );
    let described = responses.message().await.unwrap().unwrap().message_response;
    let Some(MessageResponse::FileDescriptorResponse(files)) = described else {
        panic!("expected file descriptors, got {described:?}");
    };
    assert!(!files.file_descriptor_proto.is_empty());
}

#[tokio::test]
async fn reflection_v1alpha_lists_services_for_older_grpcurl() {
    use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1alpha::ServerReflectionRequest;

    let sluice = Sluice::start(CONFIG, &[]);
    let mut client = ServerReflectionClient::new(sluice.channel().await);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut responses = client
        .server_reflection_info(tokio_stream::iter(vec![request]))
        .await
        .expect("reflection answers")
        .into_inner();
    let listed = responses.message().await.unwrap().unwrap().message_response;
    let Some(MessageResponse::ListServicesResponse(list)) = listed else {
        panic!("expected a service list, got {listed:?}");
    };
    assert!(list.service.iter().any(|s| s.name == RLS));
    assert!(list.service.iter().any(|s| s.name == RLQS), "{list:?}");
}

#[tokio::test]
async fn with_healthy_with_at_least_one_config_loaded_health_waits_for_a_domain() {
    // An empty config directory loads (no domain): not serving until a domain arrives.
    let sluice = Sluice::start_with(
        &[],
        &[],
        &[("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true")],
    );
    let not_serving = (ServingStatus::NotServing as i32, 500);
    let serving = (ServingStatus::Serving as i32, 200);
    assert!(sluice.wait_health(not_serving).await, "{}", sluice.log());
    std::fs::write(sluice.config_dir.path().join("config.yaml"), CONFIG).unwrap();
    assert!(sluice.wait_health(serving).await, "{}", sluice.log());
    std::fs::remove_file(sluice.config_dir.path().join("config.yaml")).unwrap();
    assert!(sluice.wait_health(not_serving).await, "{}", sluice.log());
    // Without the setting, a config without domains serves.
    let plain = Sluice::start_with(&[], &[], &[]);
    assert!(plain.wait_health(serving).await, "{}", plain.log());
}

#[tokio::test]
async fn force_start_without_initial_config_serves_until_a_config_loads() {
    let broken = [("config.yaml", "domain: d\ndescriptors: [oops\n")];
    let sluice = Sluice::start_with(
        &broken,
        &[],
        &[
            ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
            ("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true"),
        ],
    );
    assert!(sluice.log().contains("config.yaml:"), "{}", sluice.log());
    assert!(
        sluice
            .wait_health((ServingStatus::NotServing as i32, 500))
            .await,
        "{}",
        sluice.log()
    );
    std::fs::write(sluice.config_dir.path().join("config.yaml"), CONFIG).unwrap();
    assert!(
        sluice
            .wait_health((ServingStatus::Serving as i32, 200))
            .await,
        "{}",
        sluice.log()
    );
}
