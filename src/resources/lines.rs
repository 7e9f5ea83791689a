//! Fast line splitting for the document splitter and the fast YAML reader.
//!
//! `str::split('\n')` searches one character at a time; these iterators
//! find line ends with `memchr` (vectorised).  Invariant: the pieces they
//! yield concatenate back to the input exactly (inclusive form) or to the
//! input with the `\n` separators removed (exclusive form), as the
//! standard library's `split_inclusive('\n')` and `split('\n')` do.

/// Lines of `text` including their `\n` (the last one may lack it); no
/// empty piece at the end.  Same pieces as `text.split_inclusive('\n')`.
pub(crate) fn inclusive(text: &str) -> impl Iterator<Item = &str> {
    let mut start = 0usize;
    let mut ends = memchr::memchr_iter(b'\n', text.as_bytes());
    std::iter::from_fn(move || {
        if start >= text.len() {
            return None;
        }
        let end = ends.next().map_or(text.len(), |i| i + 1);
        // `\n` is ASCII, so both bounds are char boundaries.
        let line = &text[start..end];
        start = end;
        Some(line)
    })
}

/// Lines of `text` without their `\n`, including a final empty piece when
/// `text` ends with `\n`.  Same pieces as `text.split('\n')`.
pub(crate) fn exclusive(text: &str) -> impl Iterator<Item = &str> {
    let mut start = Some(0usize);
    let mut ends = memchr::memchr_iter(b'\n', text.as_bytes());
    std::iter::from_fn(move || {
        let s = start?;
        match ends.next() {
            Some(i) => {
                start = Some(i + 1);
                Some(&text[s..i])
            }
            None => {
                start = None;
                Some(&text[s..])
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SAMPLES: &[&str] = &[
        "",
        "\n",
        "\n\n",
        "a",
        "a\n",
        "a\nb",
        "a\r\nb\r\n",
        "é\n€\n\n𝄞",
        "---\nkind: X\n---\n",
    ];

    #[test]
    fn matches_std_on_samples() {
        for s in SAMPLES {
            assert_eq!(
                inclusive(s).collect::<Vec<_>>(),
                s.split_inclusive('\n').collect::<Vec<_>>(),
                "{s:?}"
            );
            assert_eq!(
                exclusive(s).collect::<Vec<_>>(),
                s.split('\n').collect::<Vec<_>>(),
                "{s:?}"
            );
        }
    }

    proptest! {
        #[test]
        fn matches_std(s in "[a\n\r é-]{0,40}") {
            prop_assert_eq!(
                inclusive(&s).collect::<Vec<_>>(),
                s.split_inclusive('\n').collect::<Vec<_>>()
            );
            prop_assert_eq!(exclusive(&s).collect::<Vec<_>>(), s.split('\n').collect::<Vec<_>>());
        }
    }
}
