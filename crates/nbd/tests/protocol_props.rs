//! Property tests of the pure codecs: decode(encode(x)) == x for every message, and
//! arbitrary bytes never panic any decoder.

use proptest::prelude::*;
use uraid_nbd::protocol::*;

/// Valid protocol strings: no NUL, at most 4096 bytes (mixed ASCII and multi-byte).
fn nbd_string() -> impl Strategy<Value = String> {
    prop::collection::vec(prop_oneof![4 => 1u8..128, 1 => 128u8..=255], 0..300)
        .prop_map(|v| v.into_iter().map(|b| if b < 128 { b as char } else { char::from_u32(0x3B1 + b as u32).unwrap_or('x') }).collect())
}

fn query() -> impl Strategy<Value = ExportQuery> {
    (nbd_string(), prop::collection::vec(any::<u16>(), 0..20)).prop_map(|(name, info_requests)| ExportQuery { name, info_requests })
}

fn option_request() -> impl Strategy<Value = OptionRequest> {
    let known = [opt::EXPORT_NAME, opt::ABORT, opt::LIST, opt::INFO, opt::GO, opt::STRUCTURED_REPLY];
    prop_oneof![
        nbd_string().prop_map(OptionRequest::ExportName),
        Just(OptionRequest::Abort),
        Just(OptionRequest::List),
        query().prop_map(OptionRequest::Info),
        query().prop_map(OptionRequest::Go),
        Just(OptionRequest::StructuredReply),
        (any::<u32>().prop_filter("unknown option", move |o| !known.contains(o)), prop::collection::vec(any::<u8>(), 0..64))
            .prop_map(|(option, data)| OptionRequest::Other { option, data }),
    ]
}

fn info_item() -> impl Strategy<Value = Info> {
    prop_oneof![
        (any::<u64>(), any::<u16>()).prop_map(|(size, flags)| Info::Export { size, flags }),
        nbd_string().prop_map(Info::Name),
        nbd_string().prop_map(Info::Description),
        (any::<u32>(), any::<u32>(), any::<u32>()).prop_map(|(minimum, preferred, maximum)| Info::BlockSize {
            minimum,
            preferred,
            maximum
        }),
        (4u16.., prop::collection::vec(any::<u8>(), 0..32)).prop_map(|(info_type, data)| Info::Other { info_type, data }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn greeting_roundtrip(flags in any::<u16>()) {
        let g = ServerGreeting { flags };
        prop_assert_eq!(ServerGreeting::decode(&g.encode()), Ok(g));
    }

    #[test]
    fn client_flags_roundtrip(flags in any::<u32>()) {
        prop_assert_eq!(ClientFlags::decode(&ClientFlags(flags).encode()), Ok(ClientFlags(flags)));
    }

    #[test]
    fn option_header_roundtrip(option in any::<u32>(), length in any::<u32>()) {
        let h = OptionHeader { option, length };
        prop_assert_eq!(OptionHeader::decode(&h.encode()), Ok(h));
    }

    #[test]
    fn option_request_roundtrip(req in option_request()) {
        let bytes = req.encode();
        prop_assert_eq!(OptionRequest::decode_message(&bytes), Ok((req, bytes.len())));
    }

    #[test]
    fn option_reply_roundtrip(option in any::<u32>(), reply_type in any::<u32>(), data in prop::collection::vec(any::<u8>(), 0..100)) {
        let r = OptionReply { option, reply_type, data };
        let bytes = r.encode();
        prop_assert_eq!(OptionReply::decode(&bytes), Ok((r, bytes.len())));
    }

    #[test]
    fn info_roundtrip(item in info_item(), option in any::<u32>()) {
        prop_assert_eq!(Info::decode(&item.encode()), Ok(item.clone()));
        let reply = OptionReply::info(option, &item);
        prop_assert_eq!(reply.reply_type, rep::INFO);
        prop_assert_eq!(Info::decode(&OptionReply::decode(&reply.encode()).map(|r| r.0.data).unwrap_or_default()), Ok(item));
    }

    #[test]
    fn server_entry_roundtrip(name in nbd_string(), details in nbd_string()) {
        let e = ServerEntry { name, details };
        prop_assert_eq!(ServerEntry::decode(&e.encode()), Ok(e));
    }

    #[test]
    fn export_name_reply_roundtrip(size in any::<u64>(), flags in any::<u16>(), no_zeroes in any::<bool>()) {
        let r = ExportNameReply { size, flags };
        let bytes = r.encode(no_zeroes);
        prop_assert_eq!(bytes.len(), if no_zeroes { 10 } else { 134 });
        prop_assert_eq!(ExportNameReply::decode(&bytes), Ok(r));
    }

    #[test]
    fn request_roundtrip(flags in any::<u16>(), command in any::<u16>(), cookie in any::<u64>(), offset in any::<u64>(), length in any::<u32>()) {
        let r = RequestHeader { flags, command, cookie, offset, length };
        prop_assert_eq!(RequestHeader::decode(&r.encode()), Ok(r));
        prop_assert_eq!(u16::from(r.command()), command);
    }

    #[test]
    fn simple_reply_roundtrip(error in any::<u32>(), cookie in any::<u64>()) {
        let r = SimpleReply { error, cookie };
        prop_assert_eq!(SimpleReply::decode(&r.encode()), Ok(r));
    }

    /// Arbitrary bytes into every decoder: errors are fine, panics are bugs; and nothing
    /// decoded claims more bytes than it was given.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200), option in any::<u32>()) {
        let _ = ServerGreeting::decode(&bytes);
        let _ = ClientFlags::decode(&bytes);
        let _ = OptionHeader::decode(&bytes);
        for o in [option, opt::EXPORT_NAME, opt::ABORT, opt::LIST, opt::INFO, opt::GO, opt::STRUCTURED_REPLY] {
            let _ = OptionRequest::decode(o, &bytes);
        }
        if let Ok((_, used)) = OptionRequest::decode_message(&bytes) {
            prop_assert!(used <= bytes.len());
        }
        if let Ok((_, used)) = OptionReply::decode(&bytes) {
            prop_assert!(used <= bytes.len());
        }
        let _ = Info::decode(&bytes);
        let _ = ServerEntry::decode(&bytes);
        let _ = ExportNameReply::decode(&bytes);
        let _ = SimpleReply::decode(&bytes);
        if let Ok(req) = RequestHeader::decode(&bytes) {
            let limits = ExportLimits { size: option as u64 * 512, read_only: option & 1 == 1, max_payload: MAX_PAYLOAD };
            if let Ok(v) = validate_request(&req, &limits) {
                // Anything accepted lies inside the export and within the payload limit.
                match v {
                    Validated::Read { offset, length } | Validated::Write { offset, length, .. } => {
                        prop_assert!(length <= MAX_PAYLOAD);
                        prop_assert!(offset + length as u64 <= limits.size);
                    }
                    Validated::Zero { offset, length, .. } => prop_assert!(offset + length as u64 <= limits.size),
                    Validated::Flush | Validated::Disconnect => {}
                }
                if limits.read_only {
                    let writes = matches!(v, Validated::Write { .. } | Validated::Zero { .. });
                    prop_assert!(!writes);
                }
            }
        }
    }

    /// Headers with the right magic and arbitrary fields: the validator's verdict is total.
    #[test]
    fn validator_is_total(flags in any::<u16>(), command in 0u16..12, offset in any::<u64>(), length in any::<u32>(), size in any::<u64>()) {
        let req = RequestHeader { flags, command, cookie: 0, offset, length };
        let limits = ExportLimits { size, read_only: false, max_payload: MAX_PAYLOAD };
        match validate_request(&req, &limits) {
            Ok(_) => {}
            Err(e) => prop_assert!([errno::EINVAL, errno::ENOSPC, errno::EPERM].contains(&e)),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    /// The fuzz target's oracle on random bytes and on valid message streams with a byte
    /// flipped (so the decoders get past the magic numbers).
    #[test]
    fn fuzz_oracle_holds(
        reqs in prop::collection::vec(option_request(), 0..4),
        headers in prop::collection::vec((any::<u16>(), 0u16..9, any::<u64>(), any::<u64>(), 0u32..64), 0..4),
        flip in any::<(usize, u8)>(),
        noise in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        uraid_nbd::protocol::check_decoders(&noise);
        let mut opts: Vec<u8> = reqs.iter().flat_map(|r| r.encode()).collect();
        let mut stream = Vec::new();
        for (flags, command, cookie, offset, length) in headers {
            let h = RequestHeader { flags, command, cookie, offset, length };
            stream.extend_from_slice(&h.encode());
            stream.extend(std::iter::repeat_n(0xEE, h.payload_len() as usize));
        }
        uraid_nbd::protocol::check_decoders(&opts);
        uraid_nbd::protocol::check_decoders(&stream);
        for buf in [&mut opts, &mut stream] {
            if !buf.is_empty() {
                let i = flip.0 % buf.len();
                buf[i] ^= flip.1;
                uraid_nbd::protocol::check_decoders(buf);
            }
        }
    }
}
