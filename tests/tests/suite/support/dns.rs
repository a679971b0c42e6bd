//! DNS servers on 127.0.0.1 for tests that make sandgate resolve names
//! (`SANDGATE_DNS_SERVER`): no name a test uses is ever asked of a real resolver.

#![allow(dead_code)]

use std::net::UdpSocket;
use std::sync::{Arc, Mutex};

use hickory_proto::op::{Message, MessageType, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{RData, Record, RecordType};

/// A DNS server on 127.0.0.1 that answers a small table and records every name it is asked.
pub fn counting_dns() -> (u16, Arc<Mutex<Vec<String>>>) {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = sock.local_addr().unwrap().port();
    let asked = Arc::new(Mutex::new(Vec::new()));
    let log = asked.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            let Ok(q) = Message::from_vec(&buf[..n]) else { continue };
            let Some(query) = q.queries.first().cloned() else { continue };
            let name = query.name().to_ascii().trim_end_matches('.').to_lowercase();
            log.lock().unwrap().push(name.clone());
            let mut r = Message::response(q.metadata.id, q.metadata.op_code);
            r.metadata.message_type = MessageType::Response;
            r.add_query(query.clone());
            let data: Vec<RData> = match (name.as_str(), query.query_type()) {
                ("allowed.sgtest", RecordType::A) => {
                    vec![RData::A(A("192.0.2.10".parse().unwrap()))]
                }
                ("allowed.sgtest", RecordType::AAAA) => {
                    vec![RData::AAAA(AAAA("2001:db8::10".parse().unwrap()))]
                }
                ("allowed.sgtest", _) => vec![],
                ("granted.sgtest", RecordType::A) => {
                    vec![RData::A(A("192.0.2.20".parse().unwrap()))]
                }
                ("granted.sgtest", _) => vec![],
                ("loop.sgtest", RecordType::A) => vec![RData::A(A("127.0.0.1".parse().unwrap()))],
                ("loop.sgtest", _) => vec![],
                // Every name under `lo.sgtest` is 127.0.0.1: a test that needs names which differ
                // only in the decision (allowed, held) takes as many as it needs.
                (n, RecordType::A) if n.ends_with(".lo.sgtest") => {
                    vec![RData::A(A("127.0.0.1".parse().unwrap()))]
                }
                (n, _) if n.ends_with(".lo.sgtest") => vec![],
                // A public-looking address, routed only to a test host's namespace
                // (`support::sandbox::PUBLIC`).
                ("pub.sgtest", RecordType::A) => vec![RData::A(A("45.90.7.2".parse().unwrap()))],
                ("pub.sgtest", _) => vec![],
                _ => {
                    r.metadata.response_code = ResponseCode::NXDomain;
                    vec![]
                }
            };
            for d in data {
                r.add_answer(Record::from_rdata(query.name().clone(), 60, d));
            }
            let _ = sock.send_to(&r.to_vec().unwrap(), from);
        }
    });
    (port, asked)
}

/// A `SANDGATE_DNS_SERVER` value nothing answers on (a UDP port of 127.0.0.1 just closed): a
/// name sandgate resolves with it fails at once ("connection refused"), and nothing leaves the
/// host. For tests of `check` with names that are not theirs to resolve.
pub fn no_dns() -> String {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let at = sock.local_addr().unwrap();
    drop(sock);
    at.to_string()
}
