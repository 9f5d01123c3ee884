"""An example Cog predictor for vidgate: it renders a test-pattern MP4 of the
requested duration with the ffmpeg binary that `imageio-ffmpeg` ships.

It stands in for a real video model so the whole path (dispatch, webhooks,
polling, outputs, failures) can be run on a machine without a GPU. A prompt
containing ``[fail]`` makes the prediction fail, and ``[sleep=SECONDS]``
makes it take at least that long, so failures and long jobs can be shown.
"""

import re
import subprocess
import tempfile
import time

import imageio_ffmpeg
from cog import BasePredictor, Input, Path


class Predictor(BasePredictor):
    def setup(self) -> None:
        # Resolving the binary once at start-up makes a broken install fail
        # the health check instead of every prediction.
        self.ffmpeg = imageio_ffmpeg.get_ffmpeg_exe()

    def predict(
        self,
        prompt: str = Input(description="What the video shows (ignored by the test pattern).", default=""),
        duration: int = Input(description="Length of the video in seconds.", default=2, ge=1, le=30),
        seed: int = Input(description="Seed; picks the tone and the pattern's colours.", default=0),
        width: int = Input(description="Frame width in pixels.", default=854, ge=16, le=1920),
        height: int = Input(description="Frame height in pixels.", default=480, ge=16, le=1080),
        fps: int = Input(description="Frames per second.", default=24, ge=1, le=60),
    ) -> Path:
        if "[fail]" in prompt:
            raise ValueError("the prompt asked this example predictor to fail")
        sleep = re.search(r"\[sleep=(\d+(?:\.\d+)?)\]", prompt)
        if sleep:
            # Short naps rather than one long sleep: Cog cancels a running
            # prediction by raising in its thread, which only happens between
            # Python instructions, never inside one long C call.
            wake_at = time.monotonic() + float(sleep.group(1))
            while time.monotonic() < wake_at:
                time.sleep(0.1)
        # Even sizes keep the H.264 encoder's 4:2:0 chroma subsampling happy.
        width -= width % 2
        height -= height % 2
        tone_hz = 220 + (seed % 8) * 55
        output = Path(tempfile.mkdtemp()) / "output.mp4"
        subprocess.run(
            [
                self.ffmpeg, "-hide_banner", "-loglevel", "error", "-y",
                "-f", "lavfi", "-i", f"testsrc2=size={width}x{height}:rate={fps}:duration={duration}",
                "-f", "lavfi", "-i", f"sine=frequency={tone_hz}:sample_rate=48000:duration={duration}",
                "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
                "-c:a", "aac", "-b:a", "96k",
                "-movflags", "+faststart", "-shortest",
                str(output),
            ],
            check=True,
        )
        return output
