//! The hidden `__merge-store` command: the git merge driver for the record store (its
//! installation is `util::merge_driver`).

use std::ffi::OsString;

use clap::Args;

#[derive(Debug, Args)]
pub struct MergeStoreArgs {
    /// %O %A %B %P as git passes them: ancestor, ours (the result goes here), theirs, path.
    #[arg(num_args = 3..=4, value_name = "FILE")]
    pub files: Vec<OsString>,
}

pub fn run(args: MergeStoreArgs) -> anyhow::Result<i32> {
    Ok(taskstore::merge::driver(
        &args.files,
        &mut std::io::stderr(),
    ))
}
