//! Parsing and validation of each value kind, good and bad inputs.

use felix_config::value::{Kind, StrCheck, Value};
use felix_config::{IndexRange, PortRange};
use std::time::Duration;

fn ok(kind: Kind, raw: &str) -> Value {
    kind.parse(raw)
        .unwrap_or_else(|e| panic!("{raw:?} rejected by {kind:?}: {e}"))
}

fn bad(kind: Kind, raw: &str) {
    assert!(
        kind.parse(raw).is_err(),
        "{raw:?} accepted by {kind:?}: {:?}",
        kind.parse(raw)
    );
}

#[test]
fn bools() {
    for t in ["true", "TRUE", "1", "yes", "Y", "t"] {
        assert_eq!(ok(Kind::Bool, t), Value::Bool(true));
    }
    for f in ["false", "0", "No", "n", "F"] {
        assert_eq!(ok(Kind::Bool, f), Value::Bool(false));
    }
    for b in ["2", "on", "off", "truee", ""] {
        bad(Kind::Bool, b);
    }
    assert_eq!(ok(Kind::OptBool, "true"), Value::OptBool(Some(true)));
}

#[test]
fn ints_use_go_syntax_and_ranges() {
    let port = Kind::Int { min: 0, max: 65535 };
    assert_eq!(ok(port, "9099"), Value::Int(9099));
    assert_eq!(ok(port, "0x10"), Value::Int(16));
    assert_eq!(ok(port, "010"), Value::Int(8));
    assert_eq!(ok(port, "0b11"), Value::Int(3));
    assert_eq!(ok(port, "0"), Value::Int(0));
    for b in ["-1", "65536", "9.5", "abc", "", "0x", "09"] {
        bad(port, b);
    }
    let any = Kind::Int {
        min: i64::MIN,
        max: i64::MAX,
    };
    assert_eq!(ok(any, "-5"), Value::Int(-5));
    bad(any, "99999999999999999999");
}

#[test]
fn durations() {
    assert_eq!(
        ok(Kind::Seconds, "90"),
        Value::Duration(Duration::from_secs(90))
    );
    assert_eq!(
        ok(Kind::Seconds, "0.5"),
        Value::Duration(Duration::from_millis(500))
    );
    assert_eq!(
        ok(Kind::Seconds, "1m30s"),
        Value::Duration(Duration::from_secs(90))
    );
    assert_eq!(
        ok(Kind::Millis, "50"),
        Value::Duration(Duration::from_millis(50))
    );
    assert_eq!(
        ok(Kind::Millis, "1s"),
        Value::Duration(Duration::from_secs(1))
    );
    for b in ["-1", "1x", "", "forever"] {
        bad(Kind::Seconds, b);
    }
}

#[test]
fn strings() {
    assert_eq!(
        ok(Kind::Str(StrCheck::Authority), "127.0.0.1:2379"),
        Value::Str("127.0.0.1:2379".into())
    );
    for b in ["127.0.0.1", "http://x:1", "a:b", ":80"] {
        bad(Kind::Str(StrCheck::Authority), b);
    }
    ok(Kind::Str(StrCheck::Hostname), "node-1.example_com");
    bad(Kind::Str(StrCheck::Hostname), "bad host");
    ok(Kind::Str(StrCheck::HostAddress), "::1");
    ok(Kind::Str(StrCheck::HostAddress), "0.0.0.0");
    bad(Kind::Str(StrCheck::HostAddress), &"a".repeat(65));
    ok(Kind::Str(StrCheck::IfaceParam), "eth+");
    bad(Kind::Str(StrCheck::IfaceParam), "averyveryverylongname");
    for r in ["", "10/second", "9999/day", "1/minute"] {
        ok(Kind::Str(StrCheck::LogRate), r);
    }
    for r in ["0/second", "10000/second", "10/week", "10", "/second"] {
        bad(Kind::Str(StrCheck::LogRate), r);
    }
}

#[test]
fn one_of() {
    let k = Kind::OneOf(&["legacy", "nft", "auto"]);
    assert_eq!(ok(k, "Legacy"), Value::Str("legacy".into()));
    assert_eq!(ok(k, "NFT"), Value::Str("nft".into()));
    bad(k, "nftables");
    let e = k.parse("x").unwrap_err();
    assert!(e.contains("legacy, nft, auto"), "{e}");
}

#[test]
fn interface_lists() {
    assert_eq!(
        ok(Kind::IfaceList, "cali,tap"),
        Value::StrList(vec!["cali".into(), "tap".into()])
    );
    for b in ["", "cali,", "ca li", "a.b", "abcdefghijklmnop"] {
        bad(Kind::IfaceList, b);
    }
    let Value::IfacePatterns(p) = ok(Kind::IfaceRegexList, "kube-ipvs0,/^veth.*/") else {
        panic!("wrong shape")
    };
    assert!(p[0].matches("kube-ipvs0") && !p[0].matches("kube-ipvs01"));
    assert!(p[1].matches("veth123") && !p[1].matches("eth0"));
    for b in ["/[/", "bad name", "/a b/"] {
        bad(Kind::IfaceRegexList, b);
    }
    assert_eq!(
        ok(Kind::IfaceFilterList, "docker+, eth0"),
        Value::StrList(vec!["docker+".into(), "eth0".into()])
    );
    bad(Kind::IfaceFilterList, "bad/name");
}

#[test]
fn regexes() {
    assert!(matches!(ok(Kind::Regex, "^eth.*"), Value::Regex(Some(_))));
    bad(Kind::Regex, "(");
}

#[test]
fn files() {
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    ok(Kind::File { must_exist: true }, manifest);
    bad(Kind::File { must_exist: true }, "/definitely/not/here.pem");
    ok(Kind::File { must_exist: false }, "/definitely/not/here.log");
}

#[test]
fn addresses() {
    assert_eq!(
        ok(Kind::Ipv4, "10.0.0.1"),
        Value::Ipv4(Some("10.0.0.1".parse().unwrap()))
    );
    assert_eq!(
        ok(Kind::Ipv4, "::ffff:10.0.0.1"),
        Value::Ipv4(Some("10.0.0.1".parse().unwrap()))
    );
    for b in ["fd00::1", "10.0.0", "10.0.0.0/8"] {
        bad(Kind::Ipv4, b);
    }
    ok(Kind::Ipv6, "fd00::1");
    bad(Kind::Ipv6, "10.0.0.1");
    let Value::Cidrs(c) = ok(Kind::CidrList, "10.1.2.3/8, fd00::1 ,192.168.0.1") else {
        panic!()
    };
    let s: Vec<String> = c.iter().map(|n| n.to_string()).collect();
    assert_eq!(s, ["10.0.0.0/8", "fd00::1/128", "192.168.0.1/32"]);
    bad(Kind::CidrList, "10.0.0.0/33");
}

#[test]
fn endpoints() {
    assert_eq!(
        ok(Kind::EndpointList, "http://a:2379, http://b:2379/"),
        Value::StrList(vec!["http://a:2379/".into(), "http://b:2379/".into()])
    );
    for b in [
        "http://a:2379,https://b:2379",
        "a:2379",
        "http://u:p@a:2379",
        "http://a:2379/path",
        "http://a:2379?x=1",
    ] {
        bad(Kind::EndpointList, b);
    }
}

#[test]
fn port_lists() {
    let Value::Ports(p) = ok(
        Kind::PortList,
        "tcp:22, udp:68,179,TCP:10.0.0.0/8:2379,udp:[fd00::/8]:53",
    ) else {
        panic!()
    };
    let s: Vec<String> = p.iter().map(|p| p.to_string()).collect();
    assert_eq!(
        s,
        [
            "tcp:22",
            "udp:68",
            "tcp:179",
            "tcp:10.0.0.0/8:2379",
            "udp:[fd00::/8]:53"
        ]
    );
    for b in [
        "sctp:22",
        "tcp:70000",
        "tcp:x",
        "tcp:1:2:3:4",
        "tcp:300.0.0.0/8:22",
    ] {
        bad(Kind::PortList, b);
    }
    assert_eq!(ok(Kind::PortList, ""), Value::Ports(vec![]));
}

#[test]
fn port_ranges() {
    assert_eq!(
        ok(Kind::PortRange, "1000:2000"),
        Value::PortRange(Some(PortRange {
            min: 1000,
            max: 2000
        }))
    );
    assert_eq!(
        ok(Kind::PortRange, "80"),
        Value::PortRange(Some(PortRange { min: 80, max: 80 }))
    );
    for b in ["2000:1000", "http", "70000", "1:"] {
        bad(Kind::PortRange, b);
    }
    assert_eq!(
        ok(Kind::PortRangeList, "30000:32767,80").to_owned(),
        Value::PortRanges(vec![
            PortRange {
                min: 30000,
                max: 32767
            },
            PortRange { min: 80, max: 80 }
        ])
    );
    bad(Kind::PortRangeList, "30000:32767,");
}

#[test]
fn mark_masks() {
    assert_eq!(ok(Kind::MarkBitmask, "0xffff0000"), Value::Mark(0xffff0000));
    assert_eq!(ok(Kind::MarkBitmask, "3"), Value::Mark(3));
    for b in ["0x1", "0", "0x100000000", "-3", "mask"] {
        bad(Kind::MarkBitmask, b);
    }
}

#[test]
fn route_tables() {
    assert_eq!(
        ok(Kind::RouteTableRange, "1-250"),
        Value::RouteTableRange(Some(IndexRange { min: 1, max: 250 }))
    );
    for b in ["0-10", "10-5", "1-251", "1..5", "x"] {
        bad(Kind::RouteTableRange, b);
    }
    assert_eq!(
        ok(Kind::RouteTableRanges, "1-250, 300-400"),
        Value::RouteTableRanges(vec![
            IndexRange { min: 1, max: 250 },
            IndexRange { min: 300, max: 400 }
        ])
    );
    for b in ["", "0-5", "5-1", "1-70000", "1-4294967296", "none-here"] {
        bad(Kind::RouteTableRanges, b);
    }
}

#[test]
fn key_value_lists() {
    let Value::KeyValues(kv) = ok(Kind::KeyValueList, "a=1, b_2=x y,") else {
        panic!()
    };
    assert_eq!(kv.get("a").map(String::as_str), Some("1"));
    assert_eq!(kv.get("b_2").map(String::as_str), Some("x y"));
    bad(Kind::KeyValueList, "novalue");
    bad(Kind::KeyValueList, "a-b=1");
    let Value::KeyDurations(kd) = ok(
        Kind::KeyDurationList,
        "CalculationGraph=30s,InternalDataplaneMainLoop=1m",
    ) else {
        panic!()
    };
    assert_eq!(
        kd.get("InternalDataplaneMainLoop"),
        Some(&Duration::from_secs(60))
    );
    bad(Kind::KeyDurationList, "a=30");
}
