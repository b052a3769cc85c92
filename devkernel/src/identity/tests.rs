use super::*;

const EXEC: &str = "0192f1a0-0000-7000-8000-000000000000";

/// (target, occurrence, raw args, canonical, args_hash, step_id) for kind `tool_call`.
const FIXTURE: &[(&str, u32, &str, &str, &str, &str)] = &[
    (
        "tool_0",
        0,
        r#"{"greeting": "world"}"#,
        r#"{"greeting":"world"}"#,
        "5c0a68e873cfe9b31497be84c0f8f082bfbcad4409171ac8b0044e1ba3ab34bc",
        "1599d345ba8c140e6c6ae015035dbb95b348b98f8892c2f65c060b2d2e16deb5",
    ),
    (
        "tool_1",
        1,
        r#"{"b": 2, "a": 1}"#,
        r#"{"a":1,"b":2}"#,
        "43258cff783fe7036d8a43033f830adfc60ec037382473548ac742b888292777",
        "1c112aa312583091419c250dd598fa9f4ac5f37eebeb27eade18724dcfa10d83",
    ),
    (
        "tool_2",
        2,
        r#"{"html": "<a>&</a>"}"#,
        r#"{"html":"\u003ca\u003e\u0026\u003c/a\u003e"}"#,
        "105ce1eb1cb9de08553984aae3cfd97499c26461bd883b15e152b63a6a1b91f9",
        "4c311078aadd9b8107222e3f022b269a17553c7bd980e3eb3ecd1fcdec3e1ed1",
    ),
    (
        "tool_3",
        0,
        "{\"unicode\": \"café — 日本語\"}",
        "{\"unicode\":\"café — 日本語\"}",
        "4dc14f19727f37e80babbb24e3fa6518e88937212494eaa3de95c46d44fbedc3",
        "e257e4efb7192526f3f510be6c19b6a440e733c0908986e98c1b2eee4246f3bb",
    ),
    (
        "tool_4",
        1,
        r#"{"nested": {"z": [1, 2, 3], "a": true}, "n": 1.5}"#,
        r#"{"n":1.5,"nested":{"a":true,"z":[1,2,3]}}"#,
        "2d0d0264e27ac63390829db77fc4e7dee31deef3b592de7164bf35bc92c58452",
        "88903b97820a3bdbf15b766ec1291b9c8702167255adce20e39f05bc16d984ce",
    ),
    (
        "tool_5",
        2,
        "{}",
        "{}",
        "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
        "d117995b7441aa811612f758aa487028507144baef7cdbd0fbc96dadcff2c05a",
    ),
    (
        "tool_6",
        0,
        r#"{"int": 5, "float": 1.0, "neg": -3, "big": 1000000000000000000000000000000}"#,
        r#"{"big":1000000000000000000000000000000,"float":1.0,"int":5,"neg":-3}"#,
        "8372facd36d1be5ea7ba80f2c40d50d94a982afa11622f26edd823f35a8c86af",
        "bb952ba75b9c5b2a6b5b086498eefe81614d0a385d9b070593b68ccaf7acaf7a",
    ),
    (
        "tool_7",
        1,
        r#"{"ctl": "line1\nline2\ttab"}"#,
        r#"{"ctl":"line1\nline2\ttab"}"#,
        "c633e306ffd15665ec14838ecceacc46b9ac6786f60158834a05c17830d4d44d",
        "0a083e867c2a5f6a9079209336868ec6dd0a8c3a6dbe35a74bc58dbd13b2921b",
    ),
    (
        "tool_8",
        2,
        r#"["a", "b"]"#,
        r#"["a","b"]"#,
        "0473ef2dc0d324ab659d3580c1134e9d812035905c4781fdd6d529b0c6860e13",
        "51f9acf620f69d5ec84b29e07df236100d46a26e4bc8369793380c31d1d814d8",
    ),
    (
        "tool_9",
        0,
        r#""plain string""#,
        r#""plain string""#,
        "100e95befce5c34a8927f2359d07d340222625dd67a32ea9c96031c7f9b5f74a",
        "b9f0150ec57fbd7104c179908c57896c6326c13274e09b34b97958aa78ef7bb0",
    ),
    (
        "tool_10",
        1,
        "42",
        "42",
        "73475cb40a568e8da8a045ced110137e159f890ac4da883b6b17dc651b3a8049",
        "75dcd5bbb2c764bfc3195cedb6e6079a7e483265a01f39442d6f4a6e52810b2f",
    ),
    (
        "tool_11",
        2,
        "null",
        "null",
        "74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b",
        "428f70685d462a8a268db47ef84511fc7f8b67ee0863b78ba3c2f8cf2dd68de7",
    ),
];

/// (kind, target, occurrence, raw args, canonical, args_hash, step_id), computed in §7.3.
const COMPUTED: &[(&str, &str, u32, &str, &str, &str, &str)] = &[
    (
        "tool_call",
        "t",
        0,
        r#"{"n":1.50,"x":1e3,"y":-0}"#,
        r#"{"n":1.50,"x":1e3,"y":-0}"#,
        "679648ae100e523eafbc5d621115e5905cdab03db7ad1881dab0029c002433d8",
        "6ec75fb0b3a533856b8cebbd764ec05e78dfd4349ed8ee39e65ed1b9f0ff86c3",
    ),
    (
        "tool_call",
        "t",
        0,
        r#"{"s":"a\u2028b","k":"\u00e9"}"#,
        "{\"k\":\"é\",\"s\":\"a\\u2028b\"}",
        "7d6dd609adb925409838577d258201fd84749c81e81a44d27e6d1f7850981a9c",
        "f8c39d18f20751332293582b7d22b8e765f58edad62147d0fa37e7e167e21830",
    ),
    (
        "tool_call",
        "t",
        0,
        "",
        "null",
        "74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b",
        "6db37b2457f3c82a563387f9afc3fca02097fafa43862c2b94efb6409c86618e",
    ),
    (
        "tool_call",
        "t",
        0,
        r#"{"c":"\b\f"}"#,
        r#"{"c":"\b\f"}"#,
        "b4b9bf4524f322805e6a95179fec4b7d1c6f62f6363ee4aaf4850dfe16a651ff",
        "d61ce743c1b23e7fd3ca1061c842ef88943afa48e871fc0ca669b740ec350809",
    ),
    (
        "tool_call",
        "search",
        0,
        r#"{"query": "rust"}"#,
        r#"{"query":"rust"}"#,
        "bf3ba9c43a8ebae5896cd3208cc0b012785dc411e7ebc2a6511145e91e031f78",
        "66521f99e59c0a40d6a02e5e7af14682c3191d9761292dfc62e169bbbd752699",
    ),
    (
        "tool_call",
        "search",
        1,
        r#"{"query": "rust"}"#,
        r#"{"query":"rust"}"#,
        "bf3ba9c43a8ebae5896cd3208cc0b012785dc411e7ebc2a6511145e91e031f78",
        "a3b6826eb57eeb4c96c4523aadd74e9411ad297c07019ae1c2606893757a7e19",
    ),
    (
        "llm_call",
        "gpt-4o-mini",
        0,
        r#"{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "stream": false}"#,
        r#"{"messages":[{"content":"hi","role":"user"}],"model":"gpt-4o-mini","stream":false}"#,
        "cb64e975831382f2bd942e1dc6066c5e6ac298b6d23add67136beca90edd0a17",
        "ecb4b284503f43f35c1846df3f06cd6b2a3d3f557b36b84251f38a5188746c19",
    ),
];

#[test]
fn fixture_vectors() {
    for (target, occ, raw, canonical, hash, id) in FIXTURE {
        assert_eq!(
            canonical_json(raw.as_bytes()).unwrap(),
            *canonical,
            "{target}"
        );
        assert_eq!(args_hash(raw.as_bytes()).unwrap(), *hash, "{target}");
        assert_eq!(
            step_id(EXEC, "tool_call", target, hash, *occ),
            *id,
            "{target}"
        );
    }
}

#[test]
fn computed_vectors() {
    for (kind, target, occ, raw, canonical, hash, id) in COMPUTED {
        assert_eq!(canonical_json(raw.as_bytes()).unwrap(), *canonical, "{raw}");
        assert_eq!(args_hash(raw.as_bytes()).unwrap(), *hash, "{raw}");
        assert_eq!(step_id(EXEC, kind, target, hash, *occ), *id, "{raw}");
    }
}

#[test]
fn escapes_control_characters_and_surrogates() {
    assert_eq!(
        canonical_json(br#""\u0001\u007f""#).unwrap(),
        "\"\\u0001\u{7f}\""
    );
    assert_eq!(canonical_json(br#""\ud83d\ude42""#).unwrap(), "\"🙂\"");
    assert_eq!(canonical_json(br#""\ud83d!""#).unwrap(), "\"\u{fffd}!\"");
    assert_eq!(canonical_json(br#"{"a":1,"a":2}"#).unwrap(), r#"{"a":2}"#);
    assert_eq!(canonical_json(b"  ").unwrap(), "null");
}

#[test]
fn rejects_invalid_json() {
    for bad in [
        "{",
        "[1,]",
        "01",
        "1.",
        "-",
        "tru",
        "\"a",
        "{\"a\" 1}",
        "1 2",
        "+1",
        "1e",
    ] {
        assert!(canonical_json(bad.as_bytes()).is_err(), "{bad}");
    }
}

#[test]
fn nesting_is_bounded_instead_of_overflowing_the_stack() {
    let nested = |depth: usize| "[".repeat(depth) + &"]".repeat(depth);
    assert_eq!(canonical_json(nested(512).as_bytes()).unwrap(), nested(512));
    assert!(canonical_json(nested(513).as_bytes()).is_err());
    // 20,000 levels aborted the process before the bound, on the 2 MiB stack of a Tokio worker.
    let deep = nested(20_000);
    let outcome = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || canonical_json(deep.as_bytes()).is_err())
        .unwrap()
        .join()
        .unwrap();
    assert!(outcome, "refused, not overflowed");
}

#[test]
fn constant_time_eq_compares_whole_strings() {
    assert!(constant_time_eq(b"", b""));
    assert!(constant_time_eq(b"s3cret", b"s3cret"));
    assert!(!constant_time_eq(b"s3cret", b"S3cret"));
    assert!(!constant_time_eq(b"s3cret", b"s3creT"));
    assert!(!constant_time_eq(b"s3cret", b"s3cre"));
    assert!(!constant_time_eq(b"s3cre", b"s3cret"));
}
