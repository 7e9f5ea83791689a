//! An object's CIDRs in the all-endpoint index, sized for the common case.
//!
//! The IP-set index holds one entry per endpoint in the cluster, and
//! nearly every endpoint has exactly one IPv4 address.  A small vector
//! with one inline `IpNet` took 32 bytes per endpoint; here that case is
//! held inline in 16, and anything else (IPv6, several addresses, a
//! network set's nets) in one boxed vector.
//!
//! Invariant (canonical form, so equal lists compare equal): `Empty` for
//! no CIDR, `V4` for exactly one IPv4 CIDR, `Many` for every other list
//! (never empty, never exactly one IPv4 CIDR).  Order is insertion order.

use ipnet::{IpNet, Ipv4Net};

/// See the module docs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Cidrs {
    #[default]
    /// No CIDR.
    Empty,
    /// Exactly one IPv4 CIDR.
    V4(Ipv4Net),
    /// Any other list, in insertion order.
    Many(Box<Vec<IpNet>>),
}

impl Cidrs {
    /// Appends `net`.
    pub fn push(&mut self, net: IpNet) {
        *self = match std::mem::take(self) {
            Cidrs::Empty => match net {
                IpNet::V4(v4) => Cidrs::V4(v4),
                other => Cidrs::Many(Box::new(vec![other])),
            },
            Cidrs::V4(first) => Cidrs::Many(Box::new(vec![IpNet::V4(first), net])),
            Cidrs::Many(mut v) => {
                v.push(net);
                Cidrs::Many(v)
            }
        };
    }

    /// The CIDRs, in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = IpNet> + '_ {
        let (one, many): (Option<IpNet>, &[IpNet]) = match self {
            Cidrs::Empty => (None, &[]),
            Cidrs::V4(n) => (Some(IpNet::V4(*n)), &[]),
            Cidrs::Many(v) => (None, v.as_slice()),
        };
        one.into_iter().chain(many.iter().copied())
    }
}

impl Extend<IpNet> for Cidrs {
    fn extend<I: IntoIterator<Item = IpNet>>(&mut self, iter: I) {
        for n in iter {
            self.push(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().expect("test CIDR")
    }

    /// Any sequence of pushes reads back in order, and the form is the
    /// canonical one for the list (so equality is list equality).
    #[test]
    fn push_keeps_order_and_canonical_form() {
        let lists: [&[&str]; 5] = [
            &[],
            &["10.0.0.1/32"],
            &["fd00::1/128"],
            &["10.0.0.1/32", "10.0.0.2/32"],
            &["fd00::1/128", "10.0.0.1/32", "10.1.0.0/16"],
        ];
        for list in lists {
            let mut c = Cidrs::default();
            c.extend(list.iter().map(|s| net(s)));
            let back: Vec<IpNet> = c.iter().collect();
            let want: Vec<IpNet> = list.iter().map(|s| net(s)).collect();
            assert_eq!(back, want);
            match (&c, list.len()) {
                (Cidrs::Empty, 0) => {}
                (Cidrs::V4(_), 1) => assert!(want[0].addr().is_ipv4()),
                (Cidrs::Many(v), n) => {
                    assert_eq!(v.len(), n);
                    assert!(n > 1 || want[0].addr().is_ipv6());
                }
                (other, n) => panic!("{other:?} is not canonical for {n} CIDRs"),
            }
        }
        let mut a = Cidrs::default();
        a.push(net("10.0.0.1/32"));
        let mut b = Cidrs::default();
        b.extend([net("10.0.0.1/32")]);
        assert_eq!(a, b);
    }

    /// The common case fits in 16 bytes (the reason for this type).
    #[test]
    fn one_ipv4_cidr_is_inline_and_small() {
        assert!(std::mem::size_of::<Cidrs>() <= 16);
    }
}
