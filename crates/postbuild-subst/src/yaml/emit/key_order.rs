//! go-yaml v2's "natural" key order (sorter.go), for string keys.

use super::unicode::{DIGIT_RANGES, LETTER_RANGES};

/// `keyList.Less` for two string keys: letters by code point, non-letters before letters, and
/// digit runs compared as numbers.
pub(super) fn go_key_less(a: &str, b: &str) -> bool {
    let mut ai = a.char_indices();
    let mut bi = b.char_indices();
    loop {
        let (ia, ca, cb) = match (ai.next(), bi.next()) {
            (Some((ia, ca)), Some((_, cb))) => (ia, ca, cb),
            (None, Some(_)) => return true,
            (_, None) => return false,
        };
        if ca == cb {
            continue;
        }
        let al = is_go_letter(ca);
        let bl = is_go_letter(cb);
        if al && bl {
            return ca < cb;
        }
        if al || bl {
            return bl;
        }
        let (mut an, mut bn) = (0i64, 0i64);
        if ca == '0' || cb == '0' {
            // The prefix before this point is the same in both keys.
            for c in a[..ia].chars().rev() {
                if !is_go_digit(c) {
                    break;
                }
                if c != '0' {
                    an = 1;
                    bn = 1;
                    break;
                }
            }
        }
        let run = |s: &str, mut n: i64| -> (i64, usize) {
            let mut len = 0;
            for c in s.chars() {
                if !is_go_digit(c) {
                    break;
                }
                // Go: int64 arithmetic that wraps, with `r - '0'` on runes.
                n = n
                    .wrapping_mul(10)
                    .wrapping_add(i64::from(c as u32) - i64::from(b'0'));
                len += 1;
            }
            (n, len)
        };
        let (an, alen) = run(&a[ia..], an);
        let (bn, blen) = run(&b[ia..], bn);
        if an != bn {
            return an < bn;
        }
        if alen != blen {
            return alen < blen;
        }
        return ca < cb;
    }
}

/// Sorts map entries with [`go_key_less`]. A hand-written merge sort: the order is not a total
/// order for some key sets, and std's sorts may panic on such comparators.
pub(super) fn sorted_order(keys: &[&str]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..keys.len()).collect();
    if keys.len() < 2 {
        return idx;
    }
    let mut buf = idx.clone();
    merge_sort(&mut idx, &mut buf, keys);
    idx
}

pub(super) fn merge_sort(v: &mut [usize], buf: &mut [usize], keys: &[&str]) {
    let n = v.len();
    if n <= 12 {
        // Insertion sort, as Go's pdqsort does for short slices.
        for i in 1..n {
            let mut j = i;
            while j > 0 && go_key_less(keys[v[j]], keys[v[j - 1]]) {
                v.swap(j, j - 1);
                j -= 1;
            }
        }
        return;
    }
    let mid = n / 2;
    {
        let (lo, hi) = v.split_at_mut(mid);
        let (blo, bhi) = buf.split_at_mut(mid);
        merge_sort(lo, blo, keys);
        merge_sort(hi, bhi, keys);
    }
    let (mut i, mut j, mut k) = (0, mid, 0);
    while i < mid && j < n {
        if go_key_less(keys[v[j]], keys[v[i]]) {
            buf[k] = v[j];
            j += 1;
        } else {
            buf[k] = v[i];
            i += 1;
        }
        k += 1;
    }
    buf[k..k + (mid - i)].copy_from_slice(&v[i..mid]);
    k += mid - i;
    buf[k..k + (n - j)].copy_from_slice(&v[j..n]);
    v.copy_from_slice(&buf[..n]);
}

/// Go `unicode.IsLetter` (Unicode 15.0, as in Go 1.21 to 1.24).
pub(super) fn is_go_letter(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_alphabetic();
    }
    in_ranges(c as u32, LETTER_RANGES)
}

/// Go `unicode.IsDigit`: category Nd.
pub(super) fn is_go_digit(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_digit();
    }
    in_ranges(c as u32, DIGIT_RANGES)
}

pub(super) fn in_ranges(cp: u32, ranges: &[(u32, u32)]) -> bool {
    ranges
        .binary_search_by(|&(lo, hi)| {
            if hi < cp {
                std::cmp::Ordering::Less
            } else if lo > cp {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}
