//! The HTTP exchange both adapters share, one module per job:
//!
//! - [`endpoint`]: the base URL rule and the TLS rule, and the join with
//!   the wire format's path;
//! - [`client`]: the transport, one reqwest client per provider and the
//!   exchange of a request up to its response's headers;
//! - [`request`]: the request's shape (a JSON POST asking for an event
//!   stream, the sensitive authentication header, the wire's extras);
//! - [`response`]: a response's verdict (the event stream, or a problem
//!   from its status and bounded error body);
//! - [`headers`]: reading response headers (retry-after, should-retry);
//! - [`failure`]: transport errors as typed problems.

pub(crate) mod client;
pub(crate) mod endpoint;
pub(crate) mod failure;
pub(crate) mod headers;
pub(crate) mod request;
pub(crate) mod response;
