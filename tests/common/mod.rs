pub mod hookfx;
pub mod runc;
