//! Replays the fuzzers' saved corpus (`fuzz/corpus/TARGET/`, kept by `bench/fuzz/run`) through
//! the same decoders the fuzz targets drive: an input that once crashed, hung or found a new
//! path must keep being handled.

use std::path::Path;

#[test]
fn every_saved_input_is_decoded_without_a_panic() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    for (name, decode) in objtier_daemon::fuzzing::TARGETS {
        let dir = corpus.join(name);
        let mut inputs: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e} (bench/fuzz/run saves it)", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        inputs.sort();
        assert!(!inputs.is_empty(), "{} is empty", dir.display());
        for input in inputs {
            let data = std::fs::read(&input).unwrap();
            decode(&data);
        }
    }
}
