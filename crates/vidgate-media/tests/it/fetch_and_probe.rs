//! Fetching over real HTTP from a server on 127.0.0.1 (the SSRF guard, the
//! limits) and probing real media the tests make.

use crate::common;

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use common::{MediaServer, image, mp3, mp4, wav};
use image::ImageFormat;
use vidgate_media::{
    FetchError, FetchSettings, Fetcher, MediaDetails, MediaFormat, ProbeError, hex, probe,
    probe_file, video_file_has_audio, video_has_audio,
};

const LIMIT: u64 = 10 * 1024 * 1024;

fn fetcher(allow_private_network: bool) -> Fetcher {
    Fetcher::new(FetchSettings {
        allow_private_network,
        ..FetchSettings::default()
    })
    .unwrap()
}

/// A fetcher that may reach only 127.0.0.1, so redirects elsewhere on the
/// loopback range stand in for redirects to a private network without
/// sending anything off this machine.
fn fetcher_trusting_localhost() -> Fetcher {
    Fetcher::new(FetchSettings {
        trusted_addresses: vec!["127.0.0.1".parse().unwrap()],
        ..FetchSettings::default()
    })
    .unwrap()
}

async fn server_with(name: &str, bytes: Vec<u8>) -> MediaServer {
    MediaServer::start(HashMap::from([(name.to_owned(), bytes)])).await
}

fn forbidden_address(result: Result<Vec<u8>, FetchError>) -> IpAddr {
    match result {
        Err(FetchError::ForbiddenAddress { address, .. }) => address,
        other => panic!("expected a refused address, got {other:?}"),
    }
}

#[tokio::test]
async fn loopback_is_refused_without_the_flag_and_fetched_with_it() {
    let server = server_with("a.png", image(ImageFormat::Png, 4, 4)).await;
    let url = server.url("a.png");
    assert_eq!(
        forbidden_address(fetcher(false).fetch(&url, LIMIT).await),
        "127.0.0.1".parse::<IpAddr>().unwrap()
    );
    let bytes = fetcher(true).fetch(&url, LIMIT).await.unwrap();
    assert_eq!(probe(&bytes).unwrap().format, MediaFormat::Png);
}

#[tokio::test]
async fn a_host_name_that_resolves_to_loopback_is_refused_by_the_resolver() {
    let server = server_with("a.png", image(ImageFormat::Png, 4, 4)).await;
    let url = format!("http://localhost:{}/file/a.png", server.address.port());
    let address = forbidden_address(fetcher(false).fetch(&url, LIMIT).await);
    assert!(address.is_loopback(), "{address}");
    assert!(fetcher(true).fetch(&url, LIMIT).await.is_ok());
}

#[tokio::test]
async fn ip_literal_hosts_in_every_spelling_are_refused() {
    let server = server_with("a.png", image(ImageFormat::Png, 4, 4)).await;
    let port = server.address.port();
    for host in [
        "127.0.0.1".to_owned(),
        "2130706433".to_owned(),
        "0x7f.0.0.1".to_owned(),
        "[::ffff:127.0.0.1]".to_owned(),
        "[::1]".to_owned(),
    ] {
        let url = format!("http://{host}:{port}/file/a.png");
        let address = forbidden_address(fetcher(false).fetch(&url, LIMIT).await);
        assert!(
            address.is_loopback() || address.to_string() == "::ffff:127.0.0.1",
            "{url}: {address}"
        );
    }
}

#[tokio::test]
async fn a_redirect_to_a_private_address_is_refused() {
    let server = server_with("a.png", image(ImageFormat::Png, 4, 4)).await;
    let fetcher = fetcher_trusting_localhost();
    // The first hop is allowed, so the refusal comes from the redirect.
    assert!(fetcher.fetch(&server.url("a.png"), LIMIT).await.is_ok());
    let port = server.address.port();
    for target in [format!("127.0.0.2:{port}"), format!("[::1]:{port}")] {
        let url = server.path_url(&format!("/away/{target}"));
        let address = forbidden_address(fetcher.fetch(&url, LIMIT).await);
        assert_ne!(address, "127.0.0.1".parse::<IpAddr>().unwrap());
    }
}

#[tokio::test]
async fn redirects_are_followed_up_to_the_limit() {
    let server = server_with("a.png", image(ImageFormat::Png, 4, 4)).await;
    let fetcher = fetcher(true);
    let five = server.path_url("/redirect/4/a.png");
    assert!(fetcher.fetch(&five, LIMIT).await.is_ok());
    let six = server.path_url("/redirect/5/a.png");
    assert_eq!(
        fetcher.fetch(&six, LIMIT).await,
        Err(FetchError::TooManyRedirects(5))
    );
    assert_eq!(
        fetcher.fetch(&server.path_url("/loop"), LIMIT).await,
        Err(FetchError::TooManyRedirects(5))
    );
}

#[tokio::test]
async fn other_schemes_are_refused() {
    for url in [
        "file:///etc/passwd",
        "ftp://127.0.0.1/a.mp4",
        "gopher://127.0.0.1/",
    ] {
        assert_eq!(
            fetcher(true).fetch(url, LIMIT).await,
            Err(FetchError::UnsupportedScheme),
            "{url}"
        );
    }
}

#[tokio::test]
async fn downloads_stop_at_the_byte_limit() {
    let server = server_with("big", vec![7u8; 5000]).await;
    let fetcher = fetcher(true);
    assert_eq!(
        fetcher.fetch(&server.url("big"), 5000).await.unwrap().len(),
        5000
    );
    assert_eq!(
        fetcher.fetch(&server.url("big"), 4999).await,
        Err(FetchError::TooLarge { limit: 4999 })
    );
    // Without a Content-Length the body is read until it passes the limit.
    let streamed = server.path_url("/stream/100000");
    assert_eq!(
        fetcher.fetch(&streamed, 100_000).await.unwrap().len(),
        100_000
    );
    assert_eq!(
        fetcher.fetch(&streamed, 50_000).await,
        Err(FetchError::TooLarge { limit: 50_000 })
    );
}

#[tokio::test]
async fn slow_servers_time_out_and_errors_are_reported() {
    let server = server_with("a", vec![1]).await;
    let impatient = Fetcher::new(FetchSettings {
        allow_private_network: true,
        total_timeout: Duration::from_millis(300),
        ..FetchSettings::default()
    })
    .unwrap();
    assert!(matches!(
        impatient.fetch(&server.path_url("/slow"), LIMIT).await,
        Err(FetchError::Timeout(_))
    ));
    assert_eq!(
        impatient.fetch(&server.url("missing"), LIMIT).await,
        Err(FetchError::Status(404))
    );
}

#[test]
fn probes_images_by_their_bytes() {
    for (format, expected) in [
        (ImageFormat::Png, MediaFormat::Png),
        (ImageFormat::Jpeg, MediaFormat::Jpg),
        (ImageFormat::WebP, MediaFormat::Webp),
    ] {
        let bytes = image(format, 64, 48);
        let info = probe(&bytes).unwrap();
        assert_eq!(info.format, expected);
        assert_eq!(info.size_bytes, bytes.len() as u64);
        assert_eq!(
            info.details,
            MediaDetails::Image {
                width: 64,
                height: 48
            }
        );
    }
    let gif = b"GIF89a\x08\x00\x08\x00\x80\x00\x00";
    assert_eq!(probe(gif), Err(ProbeError::UnknownFormat));
}

#[test]
fn probes_an_engine_mp4() {
    let bytes = mp4(320, 240, 2, 24);
    let info = probe(&bytes).unwrap();
    assert_eq!(info.format, MediaFormat::Mp4);
    let MediaDetails::Video {
        width,
        height,
        duration_ms,
        frame_rate,
    } = info.details
    else {
        panic!("not a video: {info:?}");
    };
    assert_eq!((width, height, duration_ms), (320, 240, 2000));
    assert_eq!(frame_rate.per_second(), 24.0);
    assert_eq!(frame_rate.frames, 48);
    // Every truncation of a real file is an error, never a panic.
    for length in [8, 40, bytes.len() / 3, bytes.len() - 1] {
        let truncated = &bytes[..length];
        if let Ok(info) = probe(truncated) {
            assert_eq!(info.format, MediaFormat::Mp4);
        }
    }
}

#[test]
fn probes_wav_and_mp3_durations() {
    let info = probe(&wav(1500)).unwrap();
    assert_eq!(info.format, MediaFormat::Wav);
    assert_eq!(info.duration_ms(), Some(1500));
    let info = probe(&mp3(40)).unwrap();
    assert_eq!(info.format, MediaFormat::Mp3);
    // 40 frames of 1152 samples at 44.1 kHz.
    let expected = 40 * 1152 * 1000 / 44_100;
    let measured = info.duration_ms().unwrap();
    assert!(
        measured.abs_diff(expected) <= 30,
        "{measured} ms, expected about {expected} ms"
    );
}

#[test]
fn mp3_reference_audio_is_decoded_to_wav_for_the_engine() {
    use vidgate_media::audio::to_wav;
    let wave = wav(1200);
    assert_eq!(to_wav(wave.clone(), 30).unwrap(), wave);
    let decoded = to_wav(mp3(40), 30).unwrap();
    let info = probe(&decoded).unwrap();
    assert_eq!(info.format, MediaFormat::Wav);
    let expected = 40 * 1152 * 1000 / 44_100;
    let measured = info.duration_ms().unwrap();
    assert!(
        measured.abs_diff(expected) <= 60,
        "{measured} ms, expected about {expected} ms"
    );
    // Longer audio is cut at the clip's length.
    let cut = to_wav(mp3(100), 1).unwrap();
    assert_eq!(probe(&cut).unwrap().duration_ms(), Some(1000));
    assert_eq!(
        to_wav(b"not audio".to_vec(), 30),
        Err(ProbeError::UnknownFormat)
    );
}

#[tokio::test]
async fn a_refusal_does_not_name_the_address_a_host_resolved_to() {
    let server = server_with("a.png", image(ImageFormat::Png, 4, 4)).await;
    let by_name = format!("http://localhost:{}/file/a.png", server.address.port());
    for url in [server.url("a.png"), by_name] {
        let refusal = fetcher(false).fetch(&url, LIMIT).await.unwrap_err();
        let message = refusal.to_string();
        assert_eq!(
            message,
            "is not a public address, which the service does not fetch from"
        );
        assert!(!message.contains("127.0.0.1") && !message.contains("loopback"));
    }
}

#[tokio::test]
async fn the_ipv4_translated_form_of_a_private_address_is_refused() {
    for url in [
        "http://[::ffff:0:127.0.0.1]/a.png",
        "http://[::ffff:0:a9fe:a9fe]/latest/meta-data/",
        "http://[64:ff9b::7f00:1]/a.png",
        "http://[2002:7f00:1::1]/a.png",
        "http://[::ffff:10.0.0.1]/a.png",
    ] {
        assert!(
            matches!(
                fetcher(false).fetch(url, LIMIT).await,
                Err(FetchError::ForbiddenAddress { .. })
            ),
            "{url}"
        );
    }
}

#[tokio::test]
async fn a_download_streams_to_a_scratch_file_with_its_hash() {
    let scratch = tempfile::tempdir().unwrap();
    let fetcher = Fetcher::new(FetchSettings {
        allow_private_network: true,
        scratch_directory: Some(scratch.path().to_owned()),
        ..FetchSettings::default()
    })
    .unwrap();
    let server = MediaServer::start(HashMap::new()).await;
    let streamed = server.path_url("/stream/3000000");
    let file = fetcher.fetch_to_file(&streamed, 3_000_000).await.unwrap();
    assert_eq!(file.size_bytes(), 3_000_000);
    assert!(file.path().starts_with(scratch.path()));
    use sha2::Digest;
    assert_eq!(
        file.sha256_hex(),
        hex(&sha2::Sha256::digest(vec![0u8; 3_000_000]))
    );
    drop(file);
    // A download over the limit leaves nothing behind either.
    assert_eq!(
        fetcher
            .fetch_to_file(&streamed, 2_999_999)
            .await
            .unwrap_err(),
        FetchError::TooLarge { limit: 2_999_999 }
    );
    assert_eq!(std::fs::read_dir(scratch.path()).unwrap().count(), 0);
}

#[tokio::test]
async fn other_spellings_of_a_url_fetch_the_same_file() {
    let server = server_with("a.png", image(ImageFormat::Png, 4, 4)).await;
    let port = server.address.port();
    for url in [
        format!("HTTP://127.0.0.1:{port}/file/a.png"),
        format!("http://127.0.0.1:{port}/file/./a.png"),
        format!("http://127.0.0.1:{port}/%66ile/a.png"),
    ] {
        assert!(fetcher(true).fetch(&url, LIMIT).await.is_ok(), "{url}");
    }
}

#[test]
fn whether_a_video_has_sound_is_read_from_its_header_boxes_on_disk_as_in_memory() {
    let directory = tempfile::tempdir().unwrap();
    let render = |generate_audio: bool| {
        let request = vidgate_engine::RenderRequest {
            width: 320,
            height: 240,
            duration_s: 1,
            fps: 12,
            seed: 3,
            prompt: "a clip with or without sound".to_owned(),
            generate_audio,
            ..vidgate_engine::RenderRequest::default()
        };
        vidgate_engine::render(
            &request,
            &|_| {},
            &std::sync::atomic::AtomicBool::new(false),
        )
        .expect("the engine renders")
        .mp4
    };
    let mut padded_with_sound = render(true);
    padded_with_sound.extend_from_slice(&(1024u32 + 8).to_be_bytes());
    padded_with_sound.extend_from_slice(b"free");
    padded_with_sound.extend_from_slice(&[0u8; 1024]);
    for (name, bytes, has_sound) in [
        ("sound.mp4", render(true), true),
        ("silent.mp4", render(false), false),
        ("padded.mp4", padded_with_sound, true),
        ("a.png", image(ImageFormat::Png, 64, 48), false),
    ] {
        let path = directory.path().join(name);
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(video_has_audio(&bytes), has_sound, "{name} in memory");
        assert_eq!(video_file_has_audio(&path), has_sound, "{name} on disk");
        // The header boxes alone answer as the parser does over the whole
        // file.
        let whole_file = re_mp4::Mp4::read_bytes(&bytes).is_ok_and(|mp4| {
            mp4.tracks()
                .values()
                .any(|track| track.kind == Some(re_mp4::TrackKind::Audio))
        });
        assert_eq!(whole_file, has_sound, "{name} read whole");
    }
    assert!(!video_file_has_audio(&directory.path().join("missing.mp4")));
}

#[test]
fn probing_a_file_on_disk_finds_what_probing_its_bytes_finds() {
    let directory = tempfile::tempdir().unwrap();
    let mut padded = mp4(320, 240, 2, 24);
    // Media data after the header boxes is skipped, not read.
    padded.extend_from_slice(&(64u32 + 8).to_be_bytes());
    padded.extend_from_slice(b"free");
    padded.extend_from_slice(&[0u8; 64]);
    for (name, bytes) in [
        ("a.png", image(ImageFormat::Png, 64, 48)),
        ("a.jpg", image(ImageFormat::Jpeg, 64, 48)),
        ("a.webp", image(ImageFormat::WebP, 64, 48)),
        ("a.mp4", mp4(320, 240, 2, 24)),
        ("padded.mp4", padded),
        ("a.wav", wav(1500)),
        ("a.mp3", mp3(40)),
    ] {
        let path = directory.path().join(name);
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(probe_file(&path), probe(&bytes), "{name}");
        assert!(probe_file(&path).is_ok(), "{name}");
    }
    let gif = directory.path().join("a.gif");
    std::fs::write(&gif, b"GIF89a\x08\x00\x08\x00\x80\x00\x00").unwrap();
    assert_eq!(probe_file(&gif), Err(ProbeError::UnknownFormat));
}
