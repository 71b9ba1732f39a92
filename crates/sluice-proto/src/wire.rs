//! RLQS usage reports as Envoy sends them, in either form of `bucket_quota_usages` (field 2):
//! the released one, a repeated `BucketQuotaUsage`, and the later one, a
//! `map<uint64, BucketQuotaUsage>` keyed by a hash of the bucket. Both are length-delimited
//! elements of field 2; an element is a map entry when its field 1 is a varint (the key) and a
//! `BucketQuotaUsage` when it is a message (the `BucketId`).

use prost::bytes::{Buf, BufMut};
use prost::encoding::{self, DecodeContext, WireType};
use prost::{DecodeError, Message};

use crate::envoy::service::rate_limit_quota::v3::BucketId;

/// One bucket's usage since the client's last report.
#[derive(Clone, PartialEq, Message)]
pub struct BucketQuotaUsage {
    #[prost(message, optional, tag = "1")]
    pub bucket_id: Option<BucketId>,
    #[prost(message, optional, tag = "2")]
    pub time_elapsed: Option<prost_types::Duration>,
    #[prost(uint64, tag = "3")]
    pub num_requests_allowed: u64,
    #[prost(uint64, tag = "4")]
    pub num_requests_denied: u64,
    #[prost(message, optional, tag = "5")]
    pub last_report: Option<prost_types::Timestamp>,
}

/// An element of the map form: the bucket's hash and its usage.
#[derive(Clone, PartialEq, Message)]
pub struct BucketQuotaUsageEntry {
    #[prost(uint64, tag = "1")]
    pub key: u64,
    #[prost(message, optional, tag = "2")]
    pub value: Option<BucketQuotaUsage>,
}

/// `envoy.service.rate_limit_quota.v3.RateLimitQuotaUsageReports`, either form.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UsageReports {
    pub domain: String,
    pub bucket_quota_usages: Vec<BucketQuotaUsage>,
}

impl Message for UsageReports {
    /// Encodes the released (repeated) form.
    fn encode_raw(&self, buf: &mut impl BufMut) {
        if !self.domain.is_empty() {
            encoding::string::encode(1, &self.domain, buf);
        }
        for usage in &self.bucket_quota_usages {
            encoding::message::encode(2, usage, buf);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        match tag {
            1 => encoding::string::merge(wire_type, &mut self.domain, buf, ctx),
            2 => {
                let mut element: Vec<u8> = Vec::new();
                encoding::bytes::merge(wire_type, &mut element, buf, ctx)?;
                self.bucket_quota_usages.push(usage_of(&element)?);
                Ok(())
            }
            _ => encoding::skip_field(wire_type, tag, buf, ctx),
        }
    }

    fn encoded_len(&self) -> usize {
        let domain = if self.domain.is_empty() {
            0
        } else {
            encoding::string::encoded_len(1, &self.domain)
        };
        domain + encoding::message::encoded_len_repeated(2, &self.bucket_quota_usages)
    }

    fn clear(&mut self) {
        self.domain.clear();
        self.bucket_quota_usages.clear();
    }
}

/// The usage in one element of field 2, whichever form it has.
fn usage_of(element: &[u8]) -> Result<BucketQuotaUsage, DecodeError> {
    if is_map_entry(element)? {
        let entry = BucketQuotaUsageEntry::decode(element)?;
        return Ok(entry.value.unwrap_or_default());
    }
    BucketQuotaUsage::decode(element)
}

/// Whether `element` is a map entry: its field 1 is a varint, or, without a field 1, its only
/// field 2 holds a usage with a bucket (a `Duration` never has one).
fn is_map_entry(element: &[u8]) -> Result<bool, DecodeError> {
    let mut buf = element;
    let mut only_field_two = true;
    while buf.has_remaining() {
        let (tag, wire_type) = encoding::decode_key(&mut buf)?;
        match (tag, wire_type) {
            (1, WireType::Varint) => return Ok(true),
            (1, _) | (3, _) | (4, _) | (5, _) => return Ok(false),
            (2, _) => {}
            _ => only_field_two = false,
        }
        encoding::skip_field(wire_type, tag, &mut buf, DecodeContext::default())?;
    }
    if !only_field_two {
        return Ok(false);
    }
    Ok(BucketQuotaUsageEntry::decode(element)
        .ok()
        .and_then(|entry| entry.value)
        .is_some_and(|usage| usage.bucket_id.is_some()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(name: &str, allowed: u64) -> BucketQuotaUsage {
        BucketQuotaUsage {
            bucket_id: Some(BucketId {
                bucket: [("name".to_string(), name.to_string())].into(),
            }),
            time_elapsed: Some(prost_types::Duration {
                seconds: 1,
                nanos: 0,
            }),
            num_requests_allowed: allowed,
            num_requests_denied: 1,
            last_report: None,
        }
    }

    #[test]
    fn both_forms_decode_to_the_same_usages() {
        let released = UsageReports {
            domain: "d".into(),
            bucket_quota_usages: vec![usage("a", 3), usage("b", 0)],
        };
        let bytes = released.encode_to_vec();
        assert_eq!(UsageReports::decode(&bytes[..]).unwrap(), released);
        // The map form: field 2 entries {1: hash, 2: usage}.
        let mut map_form = Vec::new();
        encoding::string::encode(1, &"d".to_string(), &mut map_form);
        for (hash, usage) in [(17u64, usage("a", 3)), (0, usage("b", 0))] {
            let entry = BucketQuotaUsageEntry {
                key: hash,
                value: Some(usage),
            };
            encoding::message::encode(2, &entry, &mut map_form);
        }
        assert_eq!(UsageReports::decode(&map_form[..]).unwrap(), released);
    }
}
