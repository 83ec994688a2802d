pub mod fakehost;
pub mod hookfx;
pub mod runc;
