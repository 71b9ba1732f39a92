//! The baseline: a bare tonic server answering every ShouldRateLimit with a constant OK, so the
//! cost of gRPC itself is measured on the same machine in the same run as sluice.
//!
//!   cargo run --release --example baseline_server -- 127.0.0.1:9081

use sluice_proto::rate_limit_response::{Code, DescriptorStatus};
use sluice_proto::rate_limit_service_server::{RateLimitService, RateLimitServiceServer};
use sluice_proto::{RateLimitRequest, RateLimitResponse};
use tonic::{Request, Response, Status};

struct AlwaysOk;

#[tonic::async_trait]
impl RateLimitService for AlwaysOk {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let statuses = request
            .get_ref()
            .descriptors
            .iter()
            .map(|_| DescriptorStatus {
                code: Code::Ok as i32,
                ..Default::default()
            })
            .collect();
        Ok(Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses,
            ..Default::default()
        }))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:9081".into())
        .parse()?;
    eprintln!("baseline listening on {addr}");
    tonic::transport::Server::builder()
        .add_service(RateLimitServiceServer::new(AlwaysOk))
        .serve(addr)
        .await?;
    Ok(())
}
