//! Small `/proc` files read into the stack, for the region's threads,
//! which must not allocate: a path built from text and a number, and the
//! file's first bytes; and a decimal field of them read as a number.
//!
//! Owns nothing but the two calls; finding the fields is the callers'.

/// Reads `/proc/` + `a` + `n` (in decimal, if given) + `b` into `buf`;
/// returns the bytes read, or `None` if the file cannot be opened or read.
pub(crate) fn read<'a>(a: &[u8], n: Option<u32>, b: &[u8], buf: &'a mut [u8]) -> Option<&'a [u8]> {
    let mut path = [0u8; 64];
    let mut len = 0;
    let mut push = |part: &[u8]| -> Option<()> {
        let end = len + part.len();
        // One byte stays for the NUL.
        if end >= path.len() {
            return None;
        }
        path[len..end].copy_from_slice(part);
        len = end;
        Some(())
    };
    push(b"/proc/")?;
    push(a)?;
    if let Some(mut v) = n {
        let mut digits = [0u8; 10];
        let mut d = digits.len();
        loop {
            d -= 1;
            digits[d] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        push(&digits[d..])?;
    }
    push(b)?;
    // SAFETY: `path` holds the path and, after it, zeros (a NUL).
    let fd = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: reads into the unfilled tail of `buf`; `fd` is ours.
        let r = unsafe { libc::read(fd, buf[got..].as_mut_ptr().cast(), buf.len() - got) };
        if r <= 0 {
            break;
        }
        got += r as usize;
    }
    // SAFETY: our descriptor, closed once.
    unsafe { libc::close(fd) };
    (got > 0).then(|| &buf[..got])
}

/// An unsigned decimal field (`b"1200"`), read byte by byte without
/// allocating; `None` if it is empty, holds anything but the digits `0-9`
/// (a sign, a space, a newline), or does not fit in a `u64`.
pub(crate) fn number(field: &[u8]) -> Option<u64> {
    if field.is_empty() {
        return None;
    }
    let mut v = 0u64;
    for &b in field {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_file_named_by_text_and_a_number() {
        let mut buf = [0u8; 4096];
        // SAFETY: no arguments.
        let pid = unsafe { libc::getpid() } as u32;
        let own = read(b"", Some(pid), b"/status", &mut buf).unwrap().to_vec();
        assert!(
            own.starts_with(b"Name:"),
            "{}",
            String::from_utf8_lossy(&own)
        );
        let me = format!("\nPid:\t{pid}\n");
        assert!(String::from_utf8_lossy(&own).contains(&me));
        assert!(read(b"self/status", None, b"", &mut buf).is_some());
        assert!(read(b"", Some(u32::MAX), b"/status", &mut buf).is_none());
        let long = [b'a'; 60];
        assert!(read(&long, None, b"", &mut buf).is_none());
    }

    #[test]
    fn reads_an_unsigned_decimal_and_nothing_else() {
        assert_eq!(number(b"0"), Some(0));
        assert_eq!(number(b"1200"), Some(1200));
        assert_eq!(number(b"007"), Some(7));
        assert_eq!(number(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(number(b""), None);
        for bad in [&b"12 "[..], b" 12", b"1x2", b"-1", b"+1", b"12\n"] {
            assert_eq!(number(bad), None, "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(number(b"18446744073709551616"), None);
        assert_eq!(number(b"99999999999999999999"), None);
    }
}
