//! Which address a request comes from: the one function every per-client
//! limit keys on (the dashboard's sign-in limits, the public endpoints'
//! fair-use limit).
//!
//! The TCP peer is the client unless it is one of the operator's trusted
//! proxies (`--trusted-proxy CIDR`). Only then are `Forwarded` (RFC 7239)
//! or, without it, `X-Forwarded-For` read, from the right: each proxy
//! appends the address it received the request from, so the rightmost
//! address that is not itself a trusted proxy is the client. Anything to
//! its left was written by the client and could be anything. Headers from
//! an untrusted peer are ignored, so a client cannot choose its own key.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::HeaderMap;
use axum::http::request::Parts;
use ipnet::IpNet;

use crate::state::AppState;

/// The networks whose requests carry a client address we believe.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    networks: Vec<IpNet>,
}

impl TrustedProxies {
    pub fn new(networks: Vec<IpNet>) -> TrustedProxies {
        TrustedProxies { networks }
    }

    fn trusts(&self, address: IpAddr) -> bool {
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
        let forwarded = forwarded_for(headers);
        // The nearest hop first: the first address no trusted proxy wrote
        // for another. When every hop is trusted, the farthest one is the
        // best we know.
        let mut client = peer;
        for address in forwarded.into_iter().rev() {
            let Some(address) = address else {
                // An unreadable entry (`unknown`, an obfuscated name) ends
                // what can be believed.
                break;
            };
            client = address.to_canonical();
            if !self.trusts(client) {
                break;
            }
        }
        client
    }
}

/// The `for` addresses of `Forwarded`, or else of `X-Forwarded-For`, in
/// header order (farthest first); `None` for an entry that is not an IP
/// address. Several header lines count as one list, in order.
fn forwarded_for(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
    let lines = |name: &str| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|line| line.split(','))
            .map(str::trim)
            .filter(|entry| !entry.is_empty())
            .map(str::to_owned)
            .collect::<Vec<String>>()
    };
    let forwarded = lines("forwarded");
    if !forwarded.is_empty() {
        return forwarded
            .iter()
            .map(|element| {
                element
                    .split(';')
                    .filter_map(|pair| pair.split_once('='))
                    .find(|(name, _)| name.trim().eq_ignore_ascii_case("for"))
                    .and_then(|(_, value)| parse_node(value.trim()))
            })
            .collect();
    }
    lines("x-forwarded-for")
        .iter()
        .map(|entry| parse_node(entry))
        .collect()
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

impl FromRequestParts<AppState> for ClientAddress {
    type Rejection = <ConnectInfo<SocketAddr> as FromRequestParts<AppState>>::Rejection;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<ClientAddress, Self::Rejection> {
        let ConnectInfo(peer) = ConnectInfo::<SocketAddr>::from_request_parts(parts, state).await?;
        Ok(ClientAddress(
            state
                .trusted_proxies
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
    fn a_trusted_peer_forwards_the_nearest_untrusted_address() {
        let trusted = proxies(&["10.0.0.0/8", "2001:db8:ffff::/48"]);
        // The client wrote 1.1.1.1 itself; the proxy appended its peer.
        let chain = headers(&[("x-forwarded-for", "1.1.1.1, 203.0.113.9, 10.0.0.2")]);
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
        // Every hop trusted: the farthest is the client.
        let internal = headers(&[("x-forwarded-for", "10.0.0.7, 10.0.0.2")]);
        assert_eq!(
            trusted.client_address(ip("10.0.0.1"), &internal),
            ip("10.0.0.7")
        );
        // Nothing forwarded: the proxy itself.
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
    fn forwarded_wins_over_x_forwarded_for_in_all_its_spellings() {
        let trusted = proxies(&["10.0.0.0/8"]);
        let both = headers(&[
            (
                "forwarded",
                "for=192.0.2.60;proto=http, For=\"[2001:db8:cafe::17]:4711\"",
            ),
            ("x-forwarded-for", "198.51.100.1"),
        ]);
        assert_eq!(
            trusted.client_address(ip("10.0.0.1"), &both),
            ip("2001:db8:cafe::17")
        );
        let with_port = headers(&[("forwarded", "for=\"192.0.2.60:8080\";by=10.0.0.1")]);
        assert_eq!(
            trusted.client_address(ip("10.0.0.1"), &with_port),
            ip("192.0.2.60")
        );
        // An obfuscated hop stops the walk at what was last believed.
        let hidden = headers(&[("forwarded", "for=192.0.2.60, for=_hidden")]);
        assert_eq!(
            trusted.client_address(ip("10.0.0.1"), &hidden),
            ip("10.0.0.1")
        );
    }
}
