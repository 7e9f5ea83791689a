//! `POST /explain` on the admin socket: the body is a [`FlowSpec`] as JSON,
//! the answer the [`Explanation`] of the running daemon's desired view.
//! A malformed flow is answered 400, a flow with neither end local 422 (the
//! CLI exits 2 on both, printing the message).

use std::sync::Arc;

use felix_actors::http::{Handler, Request, Response};
use parking_lot::Mutex;

use crate::calc::view::DataplaneView;

use super::{explain, Flow, FlowSpec, Settings};

/// The handler over the daemon's shared view.
pub fn explain_handler(
    view: Arc<Mutex<DataplaneView>>,
    settings: Settings,
    node: String,
) -> Handler {
    Arc::new(move |req: &Request| {
        let spec: FlowSpec = match serde_json::from_str(&req.body) {
            Ok(s) => s,
            Err(e) => return Response::error(400, &format!("bad flow: {e}")),
        };
        let flow = match Flow::new(&spec) {
            Ok(f) => f,
            Err(e) => return Response::error(400, &e.to_string()),
        };
        let answer = explain(&view.lock(), &settings, &node, &flow);
        match answer {
            Ok(x) => match serde_json::to_string(&x) {
                Ok(b) => Response::json(200, b),
                Err(e) => Response::error(500, &e.to_string()),
            },
            Err(e) => Response::error(422, &e.to_string()),
        }
    })
}
