//! How a provider target names reference media in a prompt, and the
//! rewriting of the customer's `@Image1`, `@Video1`, `@Audio1` (the
//! catalog's syntax, SPEC.md common rule 6) into it.
//!
//! fal's endpoints take the catalog's syntax as it is ("Refer to them in
//! the prompt as @Image1, @Image2", fal's generated endpoint types for
//! `bytedance/seedance-2.0/reference-to-video`); Replicate's do not:
//! `bytedance/seedance-2.0` wants `[Image1]`, `[Video1]`, `[Audio1]` and
//! `kwaivgi/kling-v3-omni-video` wants `<<<image_1>>>`, `<<<video_1>>>`
//! (their version API pages). A prompt sent unchanged there names nothing,
//! and the references are not bound.
//!
//! Only a real mention is rewritten: `@` + `Image`, `Video` or `Audio` + a
//! number, standing alone as a word (not the tail of an e-mail address
//! such as `x@Image1` or `a@Image1.com`: no ASCII letter, digit or `._%+-`
//! right before the `@`, no ASCII letter, digit, `_`, `@` or domain right
//! after the number), whose number points into the list given (`@Image3`
//! with two images is left as it is). Everything else in the prompt is
//! kept byte for byte.

use std::borrow::Cow;

use serde::Deserialize;

/// The kinds of reference media a prompt can name, in the catalog's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReferenceKind {
    Image,
    Video,
    Audio,
}

impl ReferenceKind {
    pub const ALL: [ReferenceKind; 3] = [
        ReferenceKind::Image,
        ReferenceKind::Video,
        ReferenceKind::Audio,
    ];

    /// The word of the catalog's syntax (`@Image1`).
    pub fn word(self) -> &'static str {
        match self {
            ReferenceKind::Image => "Image",
            ReferenceKind::Video => "Video",
            ReferenceKind::Audio => "Audio",
        }
    }

    /// The catalog parameter holding the list the number points into.
    pub fn list_parameter(self) -> &'static str {
        match self {
            ReferenceKind::Image => "reference_image_urls",
            ReferenceKind::Video => "reference_video_urls",
            ReferenceKind::Audio => "reference_audio_urls",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The marker of a template that the mention's number replaces.
pub const NUMBER_MARKER: &str = "{n}";

/// How a target names each kind of reference: a template in which `{n}`
/// is the mention's number, counted from 1 in list order
/// (`{"image": "[Image{n}]"}`). A kind left out is not rewritten; the
/// backends file check wants one for every list a mode sends.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReferenceSyntax {
    #[serde(default)]
    pub image: Option<String>,
    #[serde(default)]
    pub video: Option<String>,
    #[serde(default)]
    pub audio: Option<String>,
    /// The page that documents it, for the operator (and the drift report).
    #[serde(default)]
    pub source: Option<String>,
}

impl ReferenceSyntax {
    /// The template of `kind`, if the target names that kind its own way.
    pub fn template(&self, kind: ReferenceKind) -> Option<&str> {
        match kind {
            ReferenceKind::Image => self.image.as_deref(),
            ReferenceKind::Video => self.video.as_deref(),
            ReferenceKind::Audio => self.audio.as_deref(),
        }
    }

    /// What `kind`'s mention number `number` becomes at this target.
    pub fn mention(&self, kind: ReferenceKind, number: usize) -> Option<String> {
        self.template(kind)
            .map(|template| template.replace(NUMBER_MARKER, &number.to_string()))
    }

    /// Whether the templates given are usable: each names the number once
    /// and could not be taken for a mention of the catalog's syntax.
    pub fn check(&self) -> Result<(), String> {
        for kind in ReferenceKind::ALL {
            let Some(template) = self.template(kind) else {
                continue;
            };
            if template.matches(NUMBER_MARKER).count() != 1 {
                return Err(format!(
                    "references.{}: {template:?} must contain {NUMBER_MARKER} once",
                    kind.word().to_lowercase()
                ));
            }
        }
        Ok(())
    }
}

/// How many items of each kind a request gave, in `ReferenceKind` order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReferenceCounts(pub [usize; 3]);

impl ReferenceCounts {
    pub fn of(&self, kind: ReferenceKind) -> usize {
        self.0[kind.index()]
    }

    /// The lengths of a validated request's reference lists.
    pub fn of_input(input: &vidgate_core::ValidatedInput) -> ReferenceCounts {
        let mut counts = ReferenceCounts::default();
        for kind in ReferenceKind::ALL {
            counts.0[kind.index()] = input
                .get(kind.list_parameter())
                .and_then(serde_json::Value::as_array)
                .map_or(0, Vec::len);
        }
        counts
    }
}

/// One mention found in a prompt: where it is and what it points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mention {
    /// Byte range of the whole mention (`@Image12`) in the prompt.
    pub start: usize,
    pub end: usize,
    pub kind: ReferenceKind,
    pub number: usize,
}

/// Every real mention in `prompt`: `@Image<n>`, `@Video<n>`, `@Audio<n>`
/// (case as written here) standing alone as a word, whose number is at
/// least 1 and at most the count of its kind.
pub fn mentions(prompt: &str, counts: ReferenceCounts) -> Vec<Mention> {
    let mut found = Vec::new();
    for (at, _) in prompt.match_indices('@') {
        if at > 0 && !prompt[..at].chars().next_back().is_some_and(opens_a_word) {
            continue;
        }
        let after_at = &prompt[at + 1..];
        for kind in ReferenceKind::ALL {
            let Some(after_word) = after_at.strip_prefix(kind.word()) else {
                continue;
            };
            let digits = after_word.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                continue;
            }
            let end = at + 1 + kind.word().len() + digits;
            if !closes_a_word(&prompt[end..]) {
                continue;
            }
            // A number too long for usize points past any list.
            let number: usize = after_word[..digits].parse().unwrap_or(usize::MAX);
            if number == 0 || number > counts.of(kind) {
                continue;
            }
            found.push(Mention {
                start: at,
                end,
                kind,
                number,
            });
        }
    }
    found
}

/// Whether the character before an `@` lets a mention start there: not an
/// ASCII letter or digit, nor another character of an e-mail address's
/// local part. Other scripts' letters open a word: a prompt in Chinese
/// runs its words together with no space (`让@Image1中的人物`).
fn opens_a_word(before: char) -> bool {
    !(before.is_ascii_alphanumeric() || matches!(before, '_' | '.' | '%' | '+' | '-' | '@'))
}

/// Whether what follows a mention's number ends it: the end of the text,
/// or a character that is not an ASCII letter or digit, `_` or `@`, and
/// not a `.` or `-` that continues a domain name (`@Image1.com`).
fn closes_a_word(rest: &str) -> bool {
    let mut chars = rest.chars();
    match chars.next() {
        None => true,
        Some(next) if next.is_ascii_alphanumeric() || next == '_' || next == '@' => false,
        Some('.' | '-') => !chars
            .next()
            .is_some_and(|after| after.is_ascii_alphanumeric()),
        Some(_) => true,
    }
}

/// `prompt` with every real mention written in `syntax`, in list order;
/// the rest of the text unchanged. Kinds `syntax` has no template for are
/// left as written.
pub fn rewrite_references<'a>(
    prompt: &'a str,
    counts: ReferenceCounts,
    syntax: &ReferenceSyntax,
) -> Cow<'a, str> {
    let found = mentions(prompt, counts);
    if found
        .iter()
        .all(|mention| syntax.template(mention.kind).is_none())
    {
        return Cow::Borrowed(prompt);
    }
    let mut rewritten = String::with_capacity(prompt.len() + 8 * found.len());
    let mut copied = 0;
    for mention in found {
        let Some(replacement) = syntax.mention(mention.kind, mention.number) else {
            continue;
        };
        rewritten.push_str(&prompt[copied..mention.start]);
        rewritten.push_str(&replacement);
        copied = mention.end;
    }
    rewritten.push_str(&prompt[copied..]);
    Cow::Owned(rewritten)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seedance_at_replicate() -> ReferenceSyntax {
        ReferenceSyntax {
            image: Some("[Image{n}]".into()),
            video: Some("[Video{n}]".into()),
            audio: Some("[Audio{n}]".into()),
            source: None,
        }
    }

    fn kling_omni_at_replicate() -> ReferenceSyntax {
        ReferenceSyntax {
            image: Some("<<<image_{n}>>>".into()),
            video: Some("<<<video_{n}>>>".into()),
            audio: None,
            source: None,
        }
    }

    #[test]
    fn mentions_are_rewritten_in_list_order_and_nothing_else_changes() {
        let two_images_a_video_an_audio = ReferenceCounts([2, 1, 1]);
        let two_images = ReferenceCounts([2, 0, 0]);
        let none = ReferenceCounts([0, 0, 0]);
        // (prompt, counts, at Replicate's Seedance, at Replicate's Kling omni)
        let table: &[(&str, ReferenceCounts, &str, &str)] = &[
            (
                "@Image1 meets @Image2",
                two_images,
                "[Image1] meets [Image2]",
                "<<<image_1>>> meets <<<image_2>>>",
            ),
            (
                "@Image2 dances to @Audio1 in the style of @Video1.",
                two_images_a_video_an_audio,
                "[Image2] dances to [Audio1] in the style of [Video1].",
                // Kling omni names no audio: left as written.
                "<<<image_2>>> dances to @Audio1 in the style of <<<video_1>>>.",
            ),
            // Punctuation and brackets around a mention.
            (
                "(@Image1), \"@Image2\"; @Image1!",
                two_images,
                "([Image1]), \"[Image2]\"; [Image1]!",
                "(<<<image_1>>>), \"<<<image_2>>>\"; <<<image_1>>>!",
            ),
            // A mention past the list given is not a reference.
            (
                "@Image1 and @Image3",
                two_images,
                "[Image1] and @Image3",
                "<<<image_1>>> and @Image3",
            ),
            ("@Video1 here", two_images, "@Video1 here", "@Video1 here"),
            (
                "@Image0 first",
                two_images,
                "@Image0 first",
                "@Image0 first",
            ),
            // E-mail addresses that contain what looks like a mention.
            (
                "write to x@Image1 or a@Image1.com",
                two_images,
                "write to x@Image1 or a@Image1.com",
                "write to x@Image1 or a@Image1.com",
            ),
            (
                "ask @Image1.com or first.last@Image2",
                two_images,
                "ask @Image1.com or first.last@Image2",
                "ask @Image1.com or first.last@Image2",
            ),
            // A longer word or number is another word.
            (
                "@Image12 @Image1x @Images1 @image1 @@Image1",
                two_images,
                "@Image12 @Image1x @Images1 @image1 @@Image1",
                "@Image12 @Image1x @Images1 @image1 @@Image1",
            ),
            // A sentence may end on a mention.
            (
                "Start on @Image1. End on @Image2",
                two_images,
                "Start on [Image1]. End on [Image2]",
                "Start on <<<image_1>>>. End on <<<image_2>>>",
            ),
            // Text around mentions in other scripts is kept.
            (
                "让@Image1中的人物挥手",
                two_images,
                "让[Image1]中的人物挥手",
                "让<<<image_1>>>中的人物挥手",
            ),
            ("", none, "", ""),
            (
                "no references at all",
                none,
                "no references at all",
                "no references at all",
            ),
        ];
        for (prompt, counts, seedance, kling) in table {
            assert_eq!(
                rewrite_references(prompt, *counts, &seedance_at_replicate()),
                *seedance,
                "{prompt}"
            );
            assert_eq!(
                rewrite_references(prompt, *counts, &kling_omni_at_replicate()),
                *kling,
                "{prompt}"
            );
            // fal takes the catalog's syntax: nothing changes.
            assert!(matches!(
                rewrite_references(prompt, *counts, &ReferenceSyntax::default()),
                Cow::Borrowed(unchanged) if unchanged == *prompt
            ));
        }
    }

    #[test]
    fn a_template_must_name_the_number_once() {
        assert!(seedance_at_replicate().check().is_ok());
        for bad in ["[Image]", "[Image{n}{n}]"] {
            let syntax = ReferenceSyntax {
                image: Some(bad.into()),
                ..Default::default()
            };
            let error = syntax.check().unwrap_err();
            assert!(error.contains("{n}"), "{error}");
        }
    }
}
