fn main() {
    println!("felix");
}
