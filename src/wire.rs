//! Front-ends. Each decodes its protocol into an [`crate::engine::Envelope`], calls
//! `Engine::execute`, and renders the outcome or the error. None of them touches the store,
//! checks a permission or picks a tenant.

pub mod grpc;
pub mod http;
