pub mod fakehost;
pub mod runc;
