fn main() {
    println!("sluice-bench: not yet wired");
}
