//! Which address a request comes from: the one function every per-client
//! limit keys on (the dashboard's sign-in limits, the public endpoints'
//! fair-use limit).
//!
//! The TCP peer is the client unless it is one of the operator's trusted
//! proxies (`--trusted-proxy CIDR`). Only then is the one header the
//! operator's proxies write read (`--client-address-header`,
//! `X-Forwarded-For` by default, or `Forwarded` of RFC 7239), and no other:
//! a header the proxies do not write is whatever the client sent, so a
//! client that could make vidgate read it would choose its own key. Each
//! proxy appends the address it received the request from, so with
//! `--proxy-hops N` proxies in front the client is the N-th entry from the
//! right; anything to its left was written by the client and could be
//! anything. Headers from an untrusted peer are ignored.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName};
use ipnet::IpNet;

/// The header the operator's proxies write the client's address into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientAddressHeader {
    /// `Forwarded` (RFC 7239): the `for=` parameter of each element.
    Forwarded,
    /// A comma-separated list of addresses, such as `X-Forwarded-For`, or a
    /// single one, such as `X-Real-IP`.
    List(HeaderName),
}

impl Default for ClientAddressHeader {
    /// What the nginx example of docs/deploy.md writes.
    fn default() -> ClientAddressHeader {
        ClientAddressHeader::List(HeaderName::from_static("x-forwarded-for"))
    }
}

impl std::str::FromStr for ClientAddressHeader {
    type Err = String;

    fn from_str(text: &str) -> Result<ClientAddressHeader, String> {
        let name = HeaderName::from_bytes(text.trim().as_bytes())
            .map_err(|_| format!("{text:?} is not a header name"))?;
        Ok(if name.as_str() == "forwarded" {
            ClientAddressHeader::Forwarded
        } else {
            ClientAddressHeader::List(name)
        })
    }
}

impl ClientAddressHeader {
    /// The header's addresses in header order (farthest first); `None` for
    /// an entry that is not an IP address. Several header lines count as
    /// one list, in order.
    fn addresses(&self, headers: &HeaderMap) -> Vec<Option<IpAddr>> {
        let name = match self {
            ClientAddressHeader::Forwarded => "forwarded",
            ClientAddressHeader::List(name) => name.as_str(),
        };
        let entries = headers
            .get_all(name)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|line| line.split(','))
            .map(str::trim)
            .filter(|entry| !entry.is_empty());
        match self {
            ClientAddressHeader::Forwarded => entries
                .map(|element| {
                    element
                        .split(';')
                        .filter_map(|pair| pair.split_once('='))
                        .find(|(name, _)| name.trim().eq_ignore_ascii_case("for"))
                        .and_then(|(_, value)| parse_node(value.trim()))
                })
                .collect(),
            ClientAddressHeader::List(_) => entries.map(parse_node).collect(),
        }
    }
}

/// The networks whose requests carry a client address we believe, the
/// header it is in, and how many proxies append to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedProxies {
    networks: Vec<IpNet>,
    header: ClientAddressHeader,
    hops: usize,
}

impl Default for TrustedProxies {
    fn default() -> TrustedProxies {
        TrustedProxies::new(Vec::new())
    }
}

impl TrustedProxies {
    /// Proxies in `networks`, one in front of vidgate, writing
    /// `X-Forwarded-For`.
    pub fn new(networks: Vec<IpNet>) -> TrustedProxies {
        TrustedProxies {
            networks,
            header: ClientAddressHeader::default(),
            hops: 1,
        }
    }

    /// The same proxies, writing `header`, `hops` of them in a row (at
    /// least one).
    pub fn reading(self, header: ClientAddressHeader, hops: usize) -> TrustedProxies {
        TrustedProxies {
            header,
            hops: hops.max(1),
            ..self
        }
    }

    /// Whether `address` is one of the trusted proxies.
    pub fn trusts(&self, address: IpAddr) -> bool {
        let address = address.to_canonical();
        self.networks
            .iter()
            .any(|network| network.contains(&address))
    }

    /// The client's address for a request from `peer` with `headers`.
    pub fn client_address(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let peer = peer.to_canonical();
        if !self.trusts(peer) {
            return peer;
        }
        let addresses = self.header.addresses(headers);
        // Fewer entries than proxies: the request did not come through them
        // all, and what it carries cannot be believed. An unreadable entry
        // (`unknown`, an obfuscated name) cannot be keyed on either. Both
        // count as the proxy's own request.
        addresses
            .len()
            .checked_sub(self.hops)
            .and_then(|client| addresses[client])
            .map_or(peer, |client| client.to_canonical())
    }
}

/// An address as proxies write it: `192.0.2.1`, `192.0.2.1:4711`,
/// `2001:db8::1`, `[2001:db8::1]:4711`, optionally quoted.
fn parse_node(text: &str) -> Option<IpAddr> {
    let text = text.trim_matches('"');
    if let Ok(address) = text.parse::<IpAddr>() {
        return Some(address);
    }
    if let Ok(address) = text.parse::<SocketAddr>() {
        return Some(address.ip());
    }
    text.strip_prefix('[')
        .and_then(|rest| rest.split_once(']'))
        .and_then(|(address, _)| address.parse().ok())
}

/// The client's address for a request's parts, when the server knows its
/// peer (it always does behind `http::serve`).
pub fn client_address_of(parts: &Parts, trusted: &TrustedProxies) -> Option<IpAddr> {
    parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| trusted.client_address(peer.ip(), &parts.headers))
}

/// The client's address, as an extractor for handlers of the API and the
/// dashboard. A request without a peer address (a test calling the router
/// directly) is refused with 500, as `ConnectInfo` itself would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddress(pub IpAddr);

/// A request state that knows which proxies to believe, as the
/// application state does: the extractor names this rather than the state,
/// so that this module stays below the state that holds its proxies.
pub trait KnowsTrustedProxies {
    fn trusted_proxies(&self) -> &TrustedProxies;
}

impl<S: KnowsTrustedProxies + Send + Sync> FromRequestParts<S> for ClientAddress {
    type Rejection = <ConnectInfo<SocketAddr> as FromRequestParts<S>>::Rejection;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &S,
    ) -> Result<ClientAddress, Self::Rejection> {
        let ConnectInfo(peer) = ConnectInfo::<SocketAddr>::from_request_parts(parts, state).await?;
        Ok(ClientAddress(
            state
                .trusted_proxies()
                .client_address(peer.ip(), &parts.headers),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxies(networks: &[&str]) -> TrustedProxies {
        TrustedProxies::new(networks.iter().map(|text| text.parse().unwrap()).collect())
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, value.parse().unwrap());
        }
        headers
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_forwards() {
        let trusted = proxies(&["10.0.0.0/8"]);
        let spoofed = headers(&[
            ("x-forwarded-for", "198.51.100.1"),
            ("forwarded", "for=198.51.100.2"),
        ]);
        assert_eq!(
            trusted.client_address(ip("203.0.113.9"), &spoofed),
            ip("203.0.113.9")
        );
        assert_eq!(
            TrustedProxies::default().client_address(ip("10.1.2.3"), &spoofed),
            ip("10.1.2.3")
        );
    }

    #[test]
    fn a_trusted_peer_names_the_client_in_its_entry_of_the_one_header() {
        let trusted = proxies(&["10.0.0.0/8", "2001:db8:ffff::/48"]);
        // The client wrote 1.1.1.1 itself; the proxy appended its peer.
        let chain = headers(&[("x-forwarded-for", "1.1.1.1, 203.0.113.9")]);
        assert_eq!(
            trusted.client_address(ip("10.0.0.1"), &chain),
            ip("203.0.113.9")
        );
        let split = headers(&[
            ("x-forwarded-for", "1.1.1.1"),
            ("x-forwarded-for", "203.0.113.9"),
        ]);
        assert_eq!(
            trusted.client_address(ip("2001:db8:ffff::1"), &split),
            ip("203.0.113.9")
        );
        // Two proxies in a row: the second appended the first's address.
        let two_hops = proxies(&["10.0.0.0/8"]).reading(ClientAddressHeader::default(), 2);
        let through_two = headers(&[("x-forwarded-for", "1.1.1.1, 203.0.113.9, 10.0.0.2")]);
        assert_eq!(
            two_hops.client_address(ip("10.0.0.1"), &through_two),
            ip("203.0.113.9")
        );
        // Fewer entries than proxies, or none: the proxy itself.
        let one_entry = headers(&[("x-forwarded-for", "203.0.113.9")]);
        assert_eq!(
            two_hops.client_address(ip("10.0.0.1"), &one_entry),
            ip("10.0.0.1")
        );
        assert_eq!(
            trusted.client_address(ip("10.0.0.1"), &HeaderMap::new()),
            ip("10.0.0.1")
        );
        // An IPv4 peer seen through an IPv6 socket is still trusted.
        assert_eq!(
            trusted.client_address(ip("::ffff:10.0.0.1"), &chain),
            ip("203.0.113.9")
        );
    }

    #[test]
    fn a_header_the_proxy_does_not_write_changes_nothing() {
        let trusted = proxies(&["10.0.0.0/8"]);
        let written = headers(&[("x-forwarded-for", "203.0.113.9")]);
        for forged in ["for=198.51.100.2", "for=\"[2001:db8::1]:4711\""] {
            let mut with_forged = written.clone();
            with_forged.append("forwarded", forged.parse().unwrap());
            assert_eq!(
                trusted.client_address(ip("10.0.0.1"), &with_forged),
                ip("203.0.113.9"),
                "{forged}"
            );
        }
        // A proxy that writes `Forwarded`: then `X-Forwarded-For` is the
        // client's own, and ignored.
        let forwarded: ClientAddressHeader = "Forwarded".parse().unwrap();
        let trusted = proxies(&["10.0.0.0/8"]).reading(forwarded, 1);
        let both = headers(&[
            ("forwarded", "for=192.0.2.60;proto=http"),
            ("x-forwarded-for", "198.51.100.1"),
        ]);
        assert_eq!(
            trusted.client_address(ip("10.0.0.1"), &both),
            ip("192.0.2.60")
        );
    }

    #[test]
    fn forwarded_is_read_in_all_its_spellings() {
        let forwarded: ClientAddressHeader = "forwarded".parse().unwrap();
        let trusted = proxies(&["10.0.0.0/8"]).reading(forwarded, 1);
        let quoted = headers(&[(
            "forwarded",
            "for=192.0.2.60;proto=http, For=\"[2001:db8:cafe::17]:4711\"",
        )]);
        assert_eq!(
            trusted.client_address(ip("10.0.0.1"), &quoted),
            ip("2001:db8:cafe::17")
        );
        let with_port = headers(&[("forwarded", "for=\"192.0.2.60:8080\";by=10.0.0.1")]);
        assert_eq!(
            trusted.client_address(ip("10.0.0.1"), &with_port),
            ip("192.0.2.60")
        );
        // An obfuscated entry cannot be keyed on: the proxy's own request.
        let hidden = headers(&[("forwarded", "for=192.0.2.60, for=_hidden")]);
        assert_eq!(
            trusted.client_address(ip("10.0.0.1"), &hidden),
            ip("10.0.0.1")
        );
        assert!("not a header".parse::<ClientAddressHeader>().is_err());
    }
}
