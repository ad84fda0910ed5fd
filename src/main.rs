use clap::Parser;
use engine::cli::{Cli, Command};

fn main() {
    let cli = Cli::parse();
    match cli.command {
        Command::Version => {
            println!(
                "engine {} (protocol version {}, storage format version {})",
                env!("CARGO_PKG_VERSION"),
                engine::protocol::PROTOCOL_VERSION,
                engine::store::STORAGE_FORMAT_VERSION
            );
        }
        Command::Import(args) => {
            let code = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt.block_on(engine::loader::run(*args)),
                Err(e) => {
                    eprintln!("error: cannot start the runtime: {e}");
                    1
                }
            };
            std::process::exit(code);
        }
        Command::Serve(args) => {
            let code = match engine::server::resolve(*args) {
                Err(e) => {
                    engine::log::error(&e);
                    2
                }
                Ok(cfg) => match tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .build()
                {
                    Err(e) => {
                        engine::log::error(&format!("cannot start the runtime: {e}"));
                        1
                    }
                    Ok(rt) => match rt.block_on(engine::server::run(cfg)) {
                        Ok(()) => 0,
                        Err(e) => {
                            engine::log::error(&e);
                            1
                        }
                    },
                },
            };
            std::process::exit(code);
        }
    }
}
