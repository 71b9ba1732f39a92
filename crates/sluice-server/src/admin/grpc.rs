//! The admin API as a gRPC service (`sluice.admin.v1.Admin`, proto/sluice/admin/v1/): each
//! call converts its message to the JSON side's (`model`), runs the same operation, and
//! converts the answer back. The caller comes from the port's authentication.

use std::sync::Arc;

use prost_types::value::Kind;
use prost_types::{ListValue, Struct, Value};
use tonic::{Request, Response, Status};

use super::auth::Caller;
use super::model::{self, DescriptorState, LimitState};
use super::{top, Admin, AdminError};
use crate::hitters::LimitName;
use sluice_config::overrides::{EntryDoc, OverrideDoc};
use sluice_proto::sluice::admin::v1 as pb;
use sluice_proto::sluice::admin::v1::admin_server::Admin as AdminService;

/// The gRPC face of `Admin`.
pub struct AdminGrpc(pub Arc<Admin>);

fn caller<T>(request: &Request<T>) -> Result<String, Status> {
    request
        .extensions()
        .get::<Caller>()
        .map(|caller| caller.0.clone())
        .ok_or_else(|| Status::unauthenticated("no authenticated caller"))
}

fn entries(entries: Vec<pb::Entry>) -> Vec<EntryDoc> {
    entries
        .into_iter()
        .map(|e| EntryDoc {
            key: e.key,
            value: e.value,
        })
        .collect()
}

fn pb_entries(entries: &[EntryDoc]) -> Vec<pb::Entry> {
    entries
        .iter()
        .map(|e| pb::Entry {
            key: e.key.clone(),
            value: e.value.clone(),
        })
        .collect()
}

/// A protobuf `Struct` as JSON.
pub fn struct_to_json(value: Struct) -> serde_json::Value {
    serde_json::Value::Object(
        value
            .fields
            .into_iter()
            .map(|(key, value)| (key, value_to_json(value)))
            .collect(),
    )
}

fn value_to_json(value: Value) -> serde_json::Value {
    match value.kind {
        None | Some(Kind::NullValue(_)) => serde_json::Value::Null,
        Some(Kind::BoolValue(b)) => serde_json::Value::Bool(b),
        // A whole number is sent as one (YAML reads `5.0` as a float a count refuses).
        Some(Kind::NumberValue(n)) if n.fract() == 0.0 && n.abs() < 9.0e15 => {
            serde_json::Value::from(n as i64)
        }
        Some(Kind::NumberValue(n)) => serde_json::Value::from(n),
        Some(Kind::StringValue(s)) => serde_json::Value::String(s),
        Some(Kind::StructValue(s)) => struct_to_json(s),
        Some(Kind::ListValue(list)) => {
            serde_json::Value::Array(list.values.into_iter().map(value_to_json).collect())
        }
    }
}

/// JSON as a protobuf `Value`.
fn json_to_value(value: &serde_json::Value) -> Value {
    let kind = match value {
        serde_json::Value::Null => Kind::NullValue(0),
        serde_json::Value::Bool(b) => Kind::BoolValue(*b),
        serde_json::Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or_default()),
        serde_json::Value::String(s) => Kind::StringValue(s.clone()),
        serde_json::Value::Array(items) => Kind::ListValue(ListValue {
            values: items.iter().map(json_to_value).collect(),
        }),
        serde_json::Value::Object(fields) => Kind::StructValue(Struct {
            fields: fields
                .iter()
                .map(|(k, v)| (k.clone(), json_to_value(v)))
                .collect(),
        }),
    };
    Value { kind: Some(kind) }
}

fn pb_override(doc: OverrideDoc) -> pb::Override {
    let limit = match json_to_value(&doc.limit).kind {
        Some(Kind::StructValue(s)) => Some(s),
        _ => None,
    };
    pb::Override {
        domain: doc.domain,
        descriptor: pb_entries(&doc.descriptor),
        name: doc.name.unwrap_or_default(),
        limit,
        shadow_mode: doc.shadow_mode,
        expires_at: doc.expires_at.unwrap_or_default(),
        updated_by: doc.updated_by.unwrap_or_default(),
        updated_at: doc.updated_at.unwrap_or_default(),
    }
}

fn pb_limit(limit: LimitState) -> pb::LimitState {
    pb::LimitState {
        name: limit.name,
        source: limit.source.to_string(),
        limit: limit.limit,
        algorithm: limit.algorithm.to_string(),
        requests_per_unit: limit.requests_per_unit,
        unit: limit.unit,
        unit_multiplier: limit.unit_multiplier,
        shadow_mode: limit.shadow_mode,
        used: limit.used,
        remaining: limit.remaining,
        held: limit.held,
        reset_at: limit.reset_at,
        reset_after_ms: limit.reset_after_ms,
        expires_at: limit.expires_at,
    }
}

fn pb_state(state: DescriptorState) -> pb::DescriptorState {
    pb::DescriptorState {
        domain: state.domain,
        descriptor: pb_entries(&state.descriptor),
        rule: state.rule,
        unlimited: state.unlimited,
        unlimited_source: state.unlimited_source.unwrap_or_default().to_string(),
        limits: state.limits.into_iter().map(pb_limit).collect(),
    }
}

fn descriptor_ref(request: pb::DescriptorRequest) -> model::DescriptorRef {
    model::DescriptorRef {
        domain: request.domain,
        descriptor: entries(request.descriptor),
        name: Some(request.name),
    }
}

#[tonic::async_trait]
impl AdminService for AdminGrpc {
    async fn put_override(
        &self,
        request: Request<pb::PutOverrideRequest>,
    ) -> Result<Response<pb::PutOverrideResponse>, Status> {
        let who = caller(&request)?;
        let request = request.into_inner();
        let Some(limit) = request.limit else {
            return Err(AdminError::invalid("limit", "is required").into());
        };
        let put = model::PutOverride {
            domain: request.domain,
            descriptor: entries(request.descriptor),
            name: Some(request.name),
            limit: struct_to_json(limit),
            shadow_mode: request.shadow_mode,
            expires_at: Some(request.expires_at),
            ttl: Some(request.ttl),
        };
        let (stored, previous) = self.0.put(&who, put).await?;
        Ok(Response::new(pb::PutOverrideResponse {
            r#override: Some(pb_override(stored)),
            previous: previous.map(pb_override),
        }))
    }

    async fn delete_override(
        &self,
        request: Request<pb::DescriptorRequest>,
    ) -> Result<Response<pb::DeleteOverrideResponse>, Status> {
        let who = caller(&request)?;
        let previous = self
            .0
            .delete(&who, descriptor_ref(request.into_inner()))
            .await?;
        Ok(Response::new(pb::DeleteOverrideResponse {
            previous: Some(pb_override(previous)),
        }))
    }

    async fn list_overrides(
        &self,
        request: Request<pb::ListOverridesRequest>,
    ) -> Result<Response<pb::ListOverridesResponse>, Status> {
        let request = request.into_inner();
        let size = usize::try_from(request.page_size).unwrap_or(usize::MAX);
        let (overrides, next) = self
            .0
            .list(&request.domain, size, &request.page_token)
            .await?;
        Ok(Response::new(pb::ListOverridesResponse {
            overrides: overrides.into_iter().map(pb_override).collect(),
            next_page_token: next.unwrap_or_default(),
        }))
    }

    async fn get_descriptor(
        &self,
        request: Request<pb::DescriptorRequest>,
    ) -> Result<Response<pb::DescriptorState>, Status> {
        let state = self.0.get(descriptor_ref(request.into_inner())).await?;
        Ok(Response::new(pb_state(state)))
    }

    async fn reset(
        &self,
        request: Request<pb::ResetRequest>,
    ) -> Result<Response<pb::ResetResponse>, Status> {
        let who = caller(&request)?;
        let mut request = request.into_inner();
        let descriptor = entries(std::mem::take(&mut request.descriptor));
        let reset = model::Reset::of_grpc(request, descriptor);
        let outcome = self.0.reset(&who, reset).await?;
        Ok(Response::new(pb::ResetResponse {
            cleared: outcome.cleared,
            kept: outcome.kept,
            state: Some(pb_state(outcome.state)),
        }))
    }

    async fn credit(
        &self,
        request: Request<pb::CreditRequest>,
    ) -> Result<Response<pb::CreditResponse>, Status> {
        let who = caller(&request)?;
        let request = request.into_inner();
        let credit = model::Credit {
            domain: request.domain,
            descriptor: entries(request.descriptor),
            name: Some(request.name),
            amount: request.amount,
        };
        let state = self.0.credit(&who, credit).await?;
        Ok(Response::new(pb::CreditResponse {
            state: Some(pb_state(state)),
        }))
    }

    async fn tracked_limits(
        &self,
        request: Request<pb::TrackedLimitsRequest>,
    ) -> Result<Response<pb::TrackedLimitsResponse>, Status> {
        let domain = request.into_inner().domain;
        let domain = (!domain.is_empty()).then_some(domain.as_str());
        let limits = self.0.tracked_limits(domain).await?;
        Ok(Response::new(pb::TrackedLimitsResponse {
            limits: limits
                .into_iter()
                .map(|name| pb::TrackedLimit {
                    domain: name.domain,
                    limit: name.limit,
                })
                .collect(),
        }))
    }

    async fn top(
        &self,
        request: Request<pb::TopRequest>,
    ) -> Result<Response<pb::TopResponse>, Status> {
        let request = request.into_inner();
        let by = top::by_named(&request.by)?;
        let window = top::window_named(&request.window)?;
        let k = (request.k > 0).then_some(request.k as usize);
        let name = LimitName {
            domain: request.domain,
            limit: request.limit,
        };
        let answer = self.0.top(name, by, window, k).await?;
        Ok(Response::new(pb::TopResponse {
            domain: answer.domain,
            limit: answer.limit,
            by: answer.by.as_str().to_string(),
            window: answer.window.as_str().to_string(),
            values: answer
                .values
                .into_iter()
                .map(|heavy| pb::HeavyValue {
                    descriptor: pb_entries(&heavy.descriptor),
                    value: heavy.value,
                    count: heavy.count,
                    error: heavy.error,
                })
                .collect(),
            total: answer.total,
            bound: answer.bound,
        }))
    }

    async fn top_value(
        &self,
        request: Request<pb::TopValueRequest>,
    ) -> Result<Response<pb::TopValueResponse>, Status> {
        let request = request.into_inner();
        let name = LimitName {
            domain: request.domain,
            limit: request.limit,
        };
        let answer = self.0.top_value(name, request.value).await?;
        let count = |c: top::Count| pb::Count {
            count: c.count,
            error: c.error,
        };
        Ok(Response::new(pb::TopValueResponse {
            descriptor: pb_entries(&answer.descriptor),
            domain: answer.domain,
            limit: answer.limit,
            value: answer.value,
            windows: answer
                .windows
                .into_iter()
                .map(|(window, counts)| {
                    let counts = pb::WindowCounts {
                        hits: Some(count(counts.hits)),
                        denials: Some(count(counts.denials)),
                    };
                    (window.to_string(), counts)
                })
                .collect(),
            denied_now: answer.denied_now,
            state: Some(pb_state(answer.state)),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_goes_through_a_struct_and_back_with_whole_numbers() {
        let limit = serde_json::json!({"unit": "minute", "requests_per_unit": 5, "burst": 2, "window": {"calendar": "month"}});
        let Some(Kind::StructValue(s)) = json_to_value(&limit).kind else {
            panic!("an object is a struct");
        };
        assert_eq!(struct_to_json(s), limit);
    }
}
