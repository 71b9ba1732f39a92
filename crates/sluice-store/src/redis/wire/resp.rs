//! Reading Redis's replies off the wire (RESP2): where one whole reply ends, and a script
//! call's reply as a list of integers. A list of integers (every script call's answer) is read
//! here directly; any other reply (an error, a surprise) is read by redis-rs's parser, so that
//! its errors keep their codes (NOSCRIPT, READONLY, OOM) for the store to act on.

use redis::{FromRedisValue, RedisResult};

use crate::redis::command::Integers;

/// The next whole reply at the start of `bytes`, decoded, and its length; `None` while it has
/// not all arrived.
pub(super) fn next_reply(bytes: &[u8]) -> Option<(RedisResult<Integers>, usize)> {
    if let Some(read) = integers(bytes) {
        return read.map(|(numbers, length)| (Ok(numbers), length));
    }
    let length = frame_end(bytes)?;
    Some((decode_other(&bytes[..length]), length))
}

/// A reply that is not a list of integers, by redis-rs's parser: an error reply becomes the
/// error it names.
fn decode_other(bytes: &[u8]) -> RedisResult<Integers> {
    let value = redis::parse_redis_value(bytes)?.extract_error()?;
    Ok(Vec::<i64>::from_redis_value(value)?.into())
}

/// `*N` and N integers: `Some(None)` while incomplete, `Some(Some(..))` with the list and its
/// length when whole; `None` when the reply is anything else.
#[allow(clippy::option_option)]
fn integers(bytes: &[u8]) -> Option<Option<(Integers, usize)>> {
    if bytes.first() != Some(&b'*') {
        return None;
    }
    let Some((head, mut at)) = line(bytes) else {
        return Some(None);
    };
    let count = usize::try_from(number(&head[1..])?).ok()?;
    let mut numbers = Integers::with_capacity(count);
    for _ in 0..count {
        let rest = &bytes[at..];
        match rest.first() {
            None => return Some(None),
            Some(b':') => {}
            Some(_) => return None,
        }
        let Some((element, length)) = line(rest) else {
            return Some(None);
        };
        numbers.push(number(&element[1..])?);
        at += length;
    }
    Some(Some((numbers, at)))
}

/// The line starting `bytes` (without its CRLF) and its length with it.
fn line(bytes: &[u8]) -> Option<(&[u8], usize)> {
    let end = bytes.iter().position(|&b| b == b'\r')?;
    (bytes.get(end + 1)? == &b'\n').then_some((&bytes[..end], end + 2))
}

/// A decimal integer, as RESP writes them.
fn number(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.split_first()? {
        (b'-', digits) => (true, digits),
        _ => (false, text),
    };
    if digits.is_empty() {
        return None;
    }
    let mut value: i64 = 0;
    for &digit in digits {
        if !digit.is_ascii_digit() {
            return None;
        }
        let digit = i64::from(digit - b'0');
        value = value.checked_mul(10)?;
        value = if negative {
            value.checked_sub(digit)?
        } else {
            value.checked_add(digit)?
        };
    }
    Some(value)
}

/// The length of the whole RESP value starting `bytes`, when it has all arrived.
pub(super) fn frame_end(bytes: &[u8]) -> Option<usize> {
    let (head, mut at) = line(bytes)?;
    let (kind, rest) = head.split_first()?;
    match kind {
        b'$' | b'=' | b'!' => match number(rest)? {
            length if length < 0 => Some(at),
            length => {
                let end = at + usize::try_from(length).ok()? + 2;
                (bytes.len() >= end).then_some(end)
            }
        },
        b'*' | b'~' | b'>' | b'%' => {
            let count = number(rest)?.max(0);
            let elements = if *kind == b'%' { count * 2 } else { count };
            for _ in 0..elements {
                at += frame_end(&bytes[at..])?;
            }
            Some(at)
        }
        // Simple strings, errors, integers and the other one-line values.
        _ => Some(at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_of_integers_is_read_whole_and_only_when_whole() {
        let reply = b"*3\r\n:1\r\n:-20\r\n:300\r\n+OK\r\n";
        let whole = reply.len() - 5;
        let (numbers, length) = next_reply(reply).unwrap();
        assert_eq!(numbers.unwrap().as_slice(), [1, -20, 300]);
        assert_eq!(length, whole, "the next reply is left for later");
        for cut in 0..whole {
            assert!(next_reply(&reply[..cut]).is_none(), "cut at {cut}");
        }
    }

    #[test]
    fn other_replies_are_framed_whole_and_read_by_redis_rs() {
        let nested = b"*2\r\n$3\r\nabc\r\n*1\r\n:5\r\n";
        assert_eq!(frame_end(nested), Some(nested.len()));
        assert!(next_reply(&nested[..nested.len() - 2]).is_none());
        let (read, length) = next_reply(b"*2\r\n$1\r\n7\r\n:8\r\n").unwrap();
        assert_eq!((read.unwrap().as_slice(), length), (&[7, 8][..], 15));
    }

    #[test]
    fn an_error_reply_keeps_its_code() {
        let (error, _) = next_reply(b"-NOSCRIPT No matching script.\r\n").unwrap();
        assert_eq!(error.unwrap_err().code(), Some("NOSCRIPT"));
        let (error, _) = next_reply(b"-READONLY You can't write against a replica.\r\n").unwrap();
        assert_eq!(error.unwrap_err().code(), Some("READONLY"));
    }

    #[test]
    fn numbers_out_of_range_are_not_numbers() {
        assert_eq!(number(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(number(b"9223372036854775808"), None);
        assert_eq!(number(b"-"), None);
        assert_eq!(number(b"1x"), None);
    }
}
