pub mod runc;
