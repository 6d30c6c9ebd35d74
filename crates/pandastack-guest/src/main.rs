//! `pandastack-guest`: the agent inside every PandaStack VM (work in progress).

fn main() {}
