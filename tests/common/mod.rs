pub mod containerd;
pub mod podman;
pub mod runc;
