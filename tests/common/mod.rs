pub mod containerd;
pub mod fakehost;
pub mod podman;
pub mod runc;
