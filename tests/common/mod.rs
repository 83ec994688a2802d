pub mod podman;
pub mod runc;
