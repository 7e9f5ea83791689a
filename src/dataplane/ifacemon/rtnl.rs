//! [`RtnetlinkSource`]: the real [`LinkSource`], a `NETLINK_ROUTE` socket
//! (crate `rtnetlink`) bound to the link and IPv4/IPv6 address multicast
//! groups, plus link and address dump requests on the same connection.
//!
//! The socket lives in the network namespace of the process (the daemon's
//! node namespace). The source owns a current-thread tokio runtime and is
//! driven from the monitor's own thread: the connection task only runs
//! while a call blocks on the runtime, and multicast messages queue in the
//! connection's channel in between.
//!
//! Decoding: `RTM_NEWLINK` gives index, `IFLA_IFNAME` and up =
//! `IFF_RUNNING` (operational state, as upstream); `RTM_DELLINK` the index;
//! `RTM_NEWADDR`/`RTM_DELADDR` the index and `IFA_LOCAL` (else
//! `IFA_ADDRESS`). A socket overrun or the end of the stream is reported as
//! [`MonitorError::Lost`], after which the monitor resubscribes and dumps.

use std::net::IpAddr;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use rtnetlink::packet_core::{NetlinkMessage, NetlinkPayload};
use rtnetlink::packet_route::address::{AddressAttribute, AddressMessage};
use rtnetlink::packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use rtnetlink::packet_route::RouteNetlinkMessage;
use rtnetlink::sys::{AsyncSocket, SocketAddr};

use super::source::{LinkSource, MonitorError};
use super::state::{IfaceEvent, LinkInfo, Snapshot};

/// Multicast group bits: `RTNLGRP_LINK` (1), `RTNLGRP_IPV4_IFADDR` (5),
/// `RTNLGRP_IPV6_IFADDR` (9), as `1 << (group - 1)`.
const GROUPS: u32 = (1 << 0) | (1 << 4) | (1 << 8);

/// The connection's channel of unsolicited (multicast) messages.
type Messages =
    futures::channel::mpsc::UnboundedReceiver<(NetlinkMessage<RouteNetlinkMessage>, SocketAddr)>;

struct Conn {
    handle: rtnetlink::Handle,
    messages: Messages,
    task: tokio::task::JoinHandle<()>,
}

/// See the module docs.
pub struct RtnetlinkSource {
    rt: tokio::runtime::Runtime,
    conn: Option<Conn>,
    timeout: Duration,
}

impl std::fmt::Debug for RtnetlinkSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RtnetlinkSource")
            .field("subscribed", &self.conn.is_some())
            .finish_non_exhaustive()
    }
}

impl Drop for RtnetlinkSource {
    fn drop(&mut self) {
        if let Some(c) = self.conn.take() {
            c.task.abort();
        }
    }
}

/// Decodes a link message.
pub fn decode_link(m: &LinkMessage) -> Option<LinkInfo> {
    let name = m.attributes.iter().find_map(|a| match a {
        LinkAttribute::IfName(n) => Some(n.clone()),
        _ => None,
    })?;
    Some(LinkInfo {
        index: m.header.index,
        name,
        up: m.header.flags.contains(LinkFlags::Running),
    })
}

/// Decodes an address message into (interface index, address).
pub fn decode_addr(m: &AddressMessage) -> Option<(u32, IpAddr)> {
    let local = m.attributes.iter().find_map(|a| match a {
        AddressAttribute::Local(ip) => Some(*ip),
        _ => None,
    });
    let addr = local.or_else(|| {
        m.attributes.iter().find_map(|a| match a {
            AddressAttribute::Address(ip) => Some(*ip),
            _ => None,
        })
    })?;
    Some((m.header.index, addr))
}

/// Decodes one multicast message: `Ok(None)` for messages we do not use.
pub fn decode_event(
    msg: NetlinkMessage<RouteNetlinkMessage>,
) -> Result<Option<IfaceEvent>, MonitorError> {
    Ok(match msg.payload {
        NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(l)) => {
            decode_link(&l).map(IfaceEvent::Link)
        }
        NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelLink(l)) => {
            Some(IfaceEvent::LinkGone {
                index: l.header.index,
            })
        }
        NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewAddress(a)) => {
            decode_addr(&a).map(|(index, addr)| IfaceEvent::Addr {
                index,
                addr,
                added: true,
            })
        }
        NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelAddress(a)) => {
            decode_addr(&a).map(|(index, addr)| IfaceEvent::Addr {
                index,
                addr,
                added: false,
            })
        }
        NetlinkPayload::Overrun(_) => {
            return Err(MonitorError::Lost("netlink socket overrun".into()))
        }
        _ => None,
    })
}

impl RtnetlinkSource {
    /// A source whose dump requests time out after `timeout`
    /// (`NetlinkTimeoutSecs`).
    pub fn new(timeout: Duration) -> Result<Self, MonitorError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| MonitorError::Subscribe(format!("runtime: {e}")))?;
        Ok(RtnetlinkSource {
            rt,
            conn: None,
            timeout,
        })
    }
}

impl LinkSource for RtnetlinkSource {
    fn subscribe(&mut self) -> Result<(), MonitorError> {
        if let Some(c) = self.conn.take() {
            c.task.abort();
        }
        let _enter = self.rt.enter();
        let (mut conn, handle, messages) =
            rtnetlink::new_connection().map_err(|e| MonitorError::Subscribe(e.to_string()))?;
        conn.socket_mut()
            .socket_mut()
            .bind(&SocketAddr::new(0, GROUPS))
            .map_err(|e| MonitorError::Subscribe(format!("bind: {e}")))?;
        let task = self.rt.spawn(conn);
        self.conn = Some(Conn {
            handle,
            messages,
            task,
        });
        Ok(())
    }

    fn dump(&mut self) -> Result<Snapshot, MonitorError> {
        let conn = self.conn.as_mut().ok_or(MonitorError::NotSubscribed)?;
        // Events queued before the dump are older than it: the dump
        // supersedes them.
        while conn.messages.try_recv().is_ok() {}
        let handle = conn.handle.clone();
        let timeout = self.timeout;
        self.rt.block_on(async move {
            let links: Vec<LinkMessage> =
                tokio::time::timeout(timeout, handle.link().get().execute().try_collect())
                    .await
                    .map_err(|_| MonitorError::Dump {
                        what: "links",
                        detail: "timed out".into(),
                    })?
                    .map_err(|e| MonitorError::Dump {
                        what: "links",
                        detail: e.to_string(),
                    })?;
            let addrs: Vec<AddressMessage> =
                tokio::time::timeout(timeout, handle.address().get().execute().try_collect())
                    .await
                    .map_err(|_| MonitorError::Dump {
                        what: "addresses",
                        detail: "timed out".into(),
                    })?
                    .map_err(|e| MonitorError::Dump {
                        what: "addresses",
                        detail: e.to_string(),
                    })?;
            Ok(Snapshot {
                links: links.iter().filter_map(decode_link).collect(),
                addrs: addrs.iter().filter_map(decode_addr).collect(),
            })
        })
    }

    fn next_event(&mut self, wait: Duration) -> Result<Option<IfaceEvent>, MonitorError> {
        let conn = self.conn.as_mut().ok_or(MonitorError::NotSubscribed)?;
        let deadline = felix_actors::clock::real_now() + wait;
        let messages = &mut conn.messages;
        self.rt.block_on(async {
            loop {
                let left = deadline.saturating_duration_since(felix_actors::clock::real_now());
                match tokio::time::timeout(left, messages.next()).await {
                    Err(_) => return Ok(None),
                    Ok(None) => return Err(MonitorError::Lost("netlink connection closed".into())),
                    Ok(Some((msg, _))) => {
                        if let Some(ev) = decode_event(msg)? {
                            return Ok(Some(ev));
                        }
                    }
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtnetlink::packet_route::address::AddressHeader;
    use rtnetlink::packet_route::link::LinkHeader;

    #[test]
    fn decodes_links_by_running_flag_and_addresses_preferring_local() {
        let mut l = LinkMessage::default();
        l.header = LinkHeader {
            index: 12,
            flags: LinkFlags::Up | LinkFlags::Running,
            ..LinkHeader::default()
        };
        l.attributes.push(LinkAttribute::IfName("cali12".into()));
        assert_eq!(
            decode_link(&l),
            Some(LinkInfo {
                index: 12,
                name: "cali12".into(),
                up: true
            })
        );
        l.header.flags = LinkFlags::Up;
        assert!(!decode_link(&l).unwrap().up, "admin up without carrier");
        l.attributes.clear();
        assert_eq!(decode_link(&l), None, "no name, no link");

        let mut a = AddressMessage::default();
        a.header = AddressHeader {
            index: 12,
            ..AddressHeader::default()
        };
        a.attributes
            .push(AddressAttribute::Address("10.0.0.2".parse().unwrap()));
        a.attributes
            .push(AddressAttribute::Local("10.0.0.1".parse().unwrap()));
        assert_eq!(decode_addr(&a), Some((12, "10.0.0.1".parse().unwrap())));
        let ev = decode_event(NetlinkMessage::from(RouteNetlinkMessage::DelAddress(a))).unwrap();
        assert_eq!(
            ev,
            Some(IfaceEvent::Addr {
                index: 12,
                addr: "10.0.0.1".parse().unwrap(),
                added: false
            })
        );
    }
}
