//! The fake's outputs: a real clip rendered by our engine, padded or huge
//! on demand.

use super::*;

pub fn hex_digest(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// A small real clip standing in for the model's output: the engine
/// renders the requested length (capped at two seconds to keep tests
/// quick) and sound, at the engine's smallest frame.
pub(super) fn render(input: &Value) -> Bytes {
    let duration = ["duration", "seconds"]
        .iter()
        .find_map(|name| match &input[*name] {
            Value::Number(number) => number.as_u64(),
            Value::String(text) => text.trim_end_matches('s').parse().ok(),
            _ => None,
        })
        .unwrap_or(1)
        .clamp(1, 2) as u32;
    let request = vidgate_engine::RenderRequest {
        width: 320,
        height: 240,
        duration_s: duration,
        fps: 12,
        seed: input["seed"].as_u64().unwrap_or(1),
        prompt: input["prompt"].as_str().unwrap_or("fake").to_owned(),
        generate_audio: input["generate_audio"].as_bool().unwrap_or(false),
        ..Default::default()
    };
    let mut mp4 = vidgate_engine::render(&request, &|_| {}, &AtomicBool::new(false))
        .expect("the fake's clip renders")
        .mp4;
    // `[fake:padded-output]`: a clip of tens of megabytes, as a 1080p model
    // makes, without the time to render one: the engine's clip followed by
    // a `free` box, which players and probes skip.
    if input.to_string().contains("[fake:padded-output]") {
        mp4.extend_from_slice(&((PADDED_OUTPUT_FREE_BYTES + 8) as u32).to_be_bytes());
        mp4.extend_from_slice(b"free");
        mp4.resize(mp4.len() + PADDED_OUTPUT_FREE_BYTES, 0);
    }
    Bytes::from(mp4)
}

/// The padding of a `[fake:padded-output]` clip: three parts of a bucket's
/// multipart upload.
pub const PADDED_OUTPUT_FREE_BYTES: usize = 20 * 1024 * 1024;

/// The length of a `[fake:huge-output]` body: 4 GiB, which no test's cap
/// allows and no test could afford to receive.
pub(super) const HUGE_OUTPUT_BYTES: u64 = 4 << 30;

/// Zero bytes, counted into `FakeState::huge_output_bytes_sent` as the
/// connection takes them.
pub(super) struct HugeBody {
    pub(super) left: u64,
    pub(super) state: Arc<FakeState>,
}

impl tokio::io::AsyncRead for HugeBody {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _context: &mut Context<'_>,
        buffer: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];
        let length = buffer.remaining().min(ZEROS.len()).min(self.left as usize);
        buffer.put_slice(&ZEROS[..length]);
        self.left -= length as u64;
        self.state
            .huge_output_bytes_sent
            .fetch_add(length as u64, Ordering::Relaxed);
        Poll::Ready(Ok(()))
    }
}
