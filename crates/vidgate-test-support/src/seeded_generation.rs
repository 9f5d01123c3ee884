//! The input and output of the succeeded generations the benches seed
//! straight into the database (`router` and `hot_paths`): as the
//! store writes them for a real one (compact, keys in order), the input
//! with the defaults filled in and the output as the worker records the
//! clip, so that a page of seeded generations costs what a page of real
//! ones costs (issue 42).

pub const INPUT: &str = r#"{"aspect_ratio":"16:9","duration":5,"generate_audio":false,"prompt":"a lighthouse on a cliff at dusk, waves below, slow push in","resolution":"720p"}"#;

pub const OUTPUT: &str = r#"{"content_type":"video/mp4","duration_s":5.0,"fps":24,"has_audio":false,"height":720,"seed":1234567,"size_bytes":1843200,"video_url":"http://127.0.0.1:8080/api/v1/files/outputs/Zq8vT1sYb2xW9kLmN3pR5tU7/gen_01a223cd58f47639a998e892cf4882e8.mp4","width":1280}"#;
