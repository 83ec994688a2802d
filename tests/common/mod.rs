pub mod containerd;
pub mod fakehost;
pub mod hookbin;
pub mod hookfx;
pub mod podman;
pub mod runc;
