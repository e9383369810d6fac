//! Writes tiktoken's `o200k_base` vocabulary, as `tiktoken-rs` ships it, into
//! one flat file that `models::tokens` embeds: the token count, the offset of
//! every token (little-endian u32, one more than the count), the tokens' bytes
//! end to end, and (in its own file) the pre-tokenizing pattern. Built once per
//! build; the server then holds the vocabulary once (~2 MB embedded, ~1 MB of
//! index) instead of `tiktoken-rs`'s three copies in hash maps (~34 MB).

use std::io::Write;
use std::path::PathBuf;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let bpe = tiktoken_rs::o200k_base().expect("tiktoken-rs builds o200k_base");
    let mut starts: Vec<u32> = vec![0];
    let mut bytes = Vec::new();
    // Ordinary ranks are 0, 1, 2, ... without gaps; the first rank it cannot
    // decode (199998) ends them (the special tokens come after a gap).
    while let Ok(token) = bpe.decode_bytes(&[starts.len() as u32 - 1]) {
        bytes.extend_from_slice(&token);
        starts.push(u32::try_from(bytes.len()).expect("the vocabulary is under 4 GiB"));
    }
    let count = starts.len() - 1;
    assert_eq!(count, 199_998, "o200k_base has 199,998 ordinary tokens");
    let mut file = std::io::BufWriter::new(
        std::fs::File::create(out.join("o200k_base.bin")).expect("OUT_DIR is writable"),
    );
    file.write_all(&(count as u32).to_le_bytes()).unwrap();
    for s in &starts {
        file.write_all(&s.to_le_bytes()).unwrap();
    }
    file.write_all(&bytes).unwrap();
    file.flush().unwrap();
    std::fs::write(out.join("o200k_base.pattern"), tiktoken_rs::O200K_BASE_PAT_STR).unwrap();
}
