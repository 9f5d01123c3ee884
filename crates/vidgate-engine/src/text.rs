//! Captions drawn with the embedded 8×8 bitmap font, scaled by whole pixels.

use crate::picture::{Picture, Yuv};

/// The glyph of one character: ASCII and Latin-1 have their own shapes, anything else (emoji,
/// other scripts) shows as a question mark so that a caption never silently loses letters.
fn glyph(character: char) -> [u8; 8] {
    let code = character as u32;
    match code {
        0x20..=0x7E => font8x8::legacy::BASIC_LEGACY[code as usize],
        0xA0..=0xFF => font8x8::legacy::LATIN_LEGACY[(code - 0xA0) as usize],
        _ => font8x8::legacy::BASIC_LEGACY[usize::from(b'?')],
    }
}

/// Breaks `text` into at most `max_lines` lines of at most `max_columns` characters, on spaces
/// where possible; text that does not fit ends with "..." so the viewer knows it was cut.
pub(crate) fn wrap(text: &str, max_columns: usize, max_lines: usize) -> Vec<Vec<char>> {
    let max_columns = max_columns.max(4);
    let mut lines: Vec<Vec<char>> = Vec::new();
    let mut current: Vec<char> = Vec::new();
    let words = text.split_whitespace().map(|word| {
        word.chars()
            .filter(|c| !c.is_control())
            .collect::<Vec<char>>()
    });
    let mut truncated = false;
    'words: for word in words {
        let mut word = &word[..];
        while !word.is_empty() {
            let needed = if current.is_empty() {
                word.len()
            } else {
                current.len() + 1 + word.len()
            };
            if needed <= max_columns {
                if !current.is_empty() {
                    current.push(' ');
                }
                current.extend_from_slice(word);
                continue 'words;
            }
            if current.is_empty() {
                // A word longer than a whole line is split hard.
                current.extend_from_slice(&word[..max_columns]);
                word = &word[max_columns..];
            }
            lines.push(std::mem::take(&mut current));
            if lines.len() == max_lines {
                truncated = true;
                break 'words;
            }
        }
    }
    if !current.is_empty() && lines.len() < max_lines {
        lines.push(current);
    }
    if truncated && let Some(last) = lines.last_mut() {
        last.truncate(max_columns - 3);
        last.extend_from_slice(&['.', '.', '.']);
    }
    lines
}

/// Draws the first `visible` characters of `line` with its top-left corner at `(left, top)`,
/// each font pixel becoming a `scale`×`scale` block.
pub(crate) fn draw_line(
    picture: &mut Picture,
    line: &[char],
    left: i32,
    top: i32,
    scale: i32,
    colour: Yuv,
    visible: usize,
) {
    for (column, &character) in line.iter().take(visible).enumerate() {
        let glyph_left = left + column as i32 * 8 * scale;
        for (glyph_row, bits) in glyph(character).iter().enumerate() {
            let mut bit = 0;
            while bit < 8 {
                // Runs of set bits are drawn as one span per pixel row.
                if bits & (1 << bit) == 0 {
                    bit += 1;
                    continue;
                }
                let run_start = bit;
                while bit < 8 && bits & (1 << bit) != 0 {
                    bit += 1;
                }
                let x_start = glyph_left + run_start * scale;
                let x_end = glyph_left + bit * scale;
                for sub_row in 0..scale {
                    picture.fill_span(
                        top + glyph_row as i32 * scale + sub_row,
                        x_start,
                        x_end,
                        colour,
                    );
                }
            }
        }
    }
}
