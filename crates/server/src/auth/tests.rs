#![allow(clippy::field_reassign_with_default)]

use super::*;

fn sha(p: &str) -> String {
    let hash: [u8; 32] = Sha256::digest(p.as_bytes()).into();
    format!("sha256:{}", hex(&hash))
}

/// An argon2id hash with small parameters (verifying reads them from the string).
fn argon(p: &str) -> String {
    use argon2::password_hash::{PasswordHasher, SaltString};
    let params = argon2::Params::new(64, 1, 1, None).unwrap();
    let a = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
    let salt = SaltString::encode_b64(b"sluice-test-salt").unwrap();
    a.hash_password(p.as_bytes(), &salt).unwrap().to_string()
}

fn auth() -> Auth {
    let mut c = AuthConfig::default();
    c.settings.publish = true;
    c.settings.read = true;
    c.settings.signing_key = "k3y".into();
    c.users = vec![
        UserConfig {
            name: "studio".into(),
            password: sha("s3cret"),
            publish: vec!["live/*".into()],
            read: vec!["*".into()],
            ips: vec!["127.0.0.0/8".into(), "::1".into()],
            api: false,
        },
        UserConfig {
            name: "viewer".into(),
            password: argon("watch"),
            publish: vec![],
            read: vec!["live".into()],
            ips: vec![],
            api: false,
        },
    ];
    Auth::new(&c).unwrap()
}

fn ask(
    auth: &Auth,
    action: Action,
    path: &str,
    creds: &Credentials,
    peer: &str,
) -> Result<Grant, Denial> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(auth.authorize(&Request {
        action,
        path,
        protocol: "test",
        id: 1,
        credentials: creds,
        peer: peer.parse().unwrap(),
        query: "",
    }))
}

fn user(name: &str, password: &str) -> Credentials {
    Credentials {
        user: Some(name.into()),
        password: Some(password.into()),
        signed: None,
        token: None,
        viewer: None,
    }
}

#[test]
fn users_by_password_permission_and_address() {
    let a = auth();
    let local = "127.0.0.1";
    assert_eq!(
        ask(
            &a,
            Action::Publish,
            "live/cam",
            &user("studio", "s3cret"),
            local
        ),
        Ok(Grant::User("studio".into()))
    );
    assert_eq!(
        ask(
            &a,
            Action::Publish,
            "live/cam",
            &user("studio", "nope"),
            local
        ),
        Err(Denial::BadCredentials)
    );
    assert_eq!(
        ask(
            &a,
            Action::Publish,
            "live/cam",
            &user("nobody", "s3cret"),
            local
        ),
        Err(Denial::BadCredentials)
    );
    assert_eq!(
        ask(
            &a,
            Action::Publish,
            "other/cam",
            &user("studio", "s3cret"),
            local
        ),
        Err(Denial::NotPermitted)
    );
    assert_eq!(
        ask(
            &a,
            Action::Publish,
            "live/cam",
            &user("studio", "s3cret"),
            "192.0.2.1"
        ),
        Err(Denial::AddressNotAllowed)
    );
    assert!(ask(&a, Action::Read, "x/y", &user("studio", "s3cret"), "::1").is_ok());
    assert_eq!(
        ask(
            &a,
            Action::Publish,
            "live/cam",
            &Credentials::default(),
            local
        ),
        Err(Denial::NoCredentials)
    );
    // argon2, twice (the second from the cache), and a wrong password after it.
    for _ in 0..2 {
        assert!(ask(
            &a,
            Action::Read,
            "live/cam",
            &user("viewer", "watch"),
            "192.0.2.1"
        )
        .is_ok());
    }
    assert_eq!(
        ask(
            &a,
            Action::Read,
            "live/cam",
            &user("viewer", "watcH"),
            local
        ),
        Err(Denial::BadCredentials)
    );
    assert_eq!(
        ask(
            &a,
            Action::Publish,
            "live/cam",
            &user("viewer", "watch"),
            local
        ),
        Err(Denial::NotPermitted)
    );
    let denials: u64 = a.denials().iter().map(|(_, n)| n).sum();
    assert_eq!(denials, 7);
}

#[test]
fn signed_urls() {
    let a = auth();
    let later = unix_now() + 60;
    let query = sign(b"k3y", Action::Read, "live/cam", later);
    let creds = Credentials::from_query(&query);
    assert_eq!(
        ask(&a, Action::Read, "live/cam", &creds, "192.0.2.1"),
        Ok(Grant::Signed)
    );
    assert_eq!(
        ask(&a, Action::Read, "live/other", &creds, "192.0.2.1"),
        Err(Denial::BadSignature)
    );
    assert_eq!(
        ask(&a, Action::Publish, "live/cam", &creds, "192.0.2.1"),
        Err(Denial::BadSignature)
    );
    let tampered = Credentials::from_query(&query.replace("expires=", "expires=1"));
    assert_eq!(
        ask(&a, Action::Read, "live/cam", &tampered, "192.0.2.1"),
        Err(Denial::BadSignature)
    );
    let old = Credentials::from_query(&sign(b"k3y", Action::Read, "live/cam", 1000));
    assert_eq!(
        ask(&a, Action::Read, "live/cam", &old, "192.0.2.1"),
        Err(Denial::Expired)
    );
    let wrong_key = Credentials::from_query(&sign(b"other", Action::Read, "live/cam", later));
    assert_eq!(
        ask(&a, Action::Read, "live/cam", &wrong_key, "192.0.2.1"),
        Err(Denial::BadSignature)
    );
}

#[test]
fn what_is_not_required_is_open() {
    let mut c = AuthConfig::default();
    c.settings.publish = true;
    let a = Auth::new(&c).unwrap();
    assert_eq!(
        ask(
            &a,
            Action::Read,
            "live/cam",
            &Credentials::default(),
            "192.0.2.1"
        ),
        Ok(Grant::Open)
    );
    assert_eq!(
        ask(
            &a,
            Action::Publish,
            "live/cam",
            &Credentials::default(),
            "127.0.0.1"
        ),
        Err(Denial::NoCredentials)
    );
}

#[test]
fn viewer_tokens() {
    let a = auth();
    let t = a.viewer_token("live/cam");
    assert_eq!(a.check_viewer_token("live/cam", &t), Ok(()));
    assert_eq!(
        a.check_viewer_token("live/other", &t),
        Err(Denial::BadSignature)
    );
    assert_eq!(
        a.check_viewer_token("live/cam", "1.00"),
        Err(Denial::BadSignature)
    );
    assert_eq!(
        a.check_viewer_token("live/cam", "junk"),
        Err(Denial::BadSignature)
    );
    // Another server's (another start's) token is not ours.
    assert_eq!(
        auth().check_viewer_token("live/cam", &t),
        Err(Denial::BadSignature)
    );
}

#[test]
fn bad_user_entries_are_refused() {
    for password in ["plain", "sha256:abc", "$argon2id$nonsense"] {
        let mut c = AuthConfig::default();
        c.users = vec![UserConfig {
            name: "x".into(),
            password: password.into(),
            publish: vec![],
            read: vec![],
            ips: vec![],
            api: false,
        }];
        assert!(Auth::new(&c).is_err(), "{password}");
    }
    let mut c = AuthConfig::default();
    c.users = vec![UserConfig {
        name: "x".into(),
        password: sha("a"),
        publish: vec![],
        read: vec![],
        ips: vec!["10.0.0.0/33".into()],
        api: false,
    }];
    assert!(Auth::new(&c).is_err());
}

#[test]
fn a_jwt_as_the_password_of_a_user_name_that_is_not_ours() {
    use jsonwebtoken::{EncodingKey, Header};
    let secret = "a shared secret of some length";
    let mut c = AuthConfig::default();
    c.settings.publish = true;
    c.settings.jwt_key = secret.into();
    c.users = vec![UserConfig {
        name: "studio".into(),
        password: sha("s3cret"),
        publish: vec!["live/*".into()],
        read: vec![],
        ips: vec![],
        api: false,
    }];
    let a = Auth::new(&c).unwrap();
    let token = jsonwebtoken::encode(
        &Header::default(),
        &serde_json::json!({"exp": unix_now() + 60, "sluice": [{"action": "publish"}]}),
        &EncodingKey::from_secret(secret.as_bytes()),
    )
    .unwrap();
    assert_eq!(
        ask(
            &a,
            Action::Publish,
            "live/x",
            &user("encoder", &token),
            "10.0.0.1"
        ),
        Ok(Grant::Token("jwt".into()))
    );
    // A user of ours is judged by its own password, whatever it looks like.
    assert_eq!(
        ask(
            &a,
            Action::Publish,
            "live/x",
            &user("studio", &token),
            "10.0.0.1"
        ),
        Err(Denial::BadCredentials)
    );
    assert_eq!(
        ask(
            &a,
            Action::Publish,
            "live/x",
            &user("studio", "s3cret"),
            "10.0.0.1"
        ),
        Ok(Grant::User("studio".into()))
    );
}

#[test]
fn apps_change_what_needs_authorization() {
    let mut c = AuthConfig::default();
    c.settings.read = true;
    c.apps = vec![AppAuthConfig {
        name: "public".into(),
        read: Some(false),
        ..Default::default()
    }];
    let a = Auth::new(&c).unwrap();
    let nobody = Credentials::default();
    assert_eq!(
        ask(&a, Action::Read, "public/cam", &nobody, "10.0.0.1"),
        Ok(Grant::Open)
    );
    assert_eq!(
        ask(&a, Action::Read, "live/cam", &nobody, "10.0.0.1"),
        Err(Denial::NoCredentials)
    );
    assert!(!a.required(Action::Publish, "live/cam"));
    assert!(!a.api_secured());
}

#[test]
fn viewer_tokens_read_their_stream_only() {
    let a = auth();
    let token = a.viewer_token("live/cam");
    let creds = Credentials::from_query(&format!("sluice_auth={token}"));
    assert_eq!(
        ask(&a, Action::Read, "live/cam", &creds, "10.0.0.1"),
        Ok(Grant::Token("viewer".into()))
    );
    assert_eq!(
        ask(&a, Action::Read, "live/other", &creds, "10.0.0.1"),
        Err(Denial::BadSignature)
    );
    assert_eq!(
        ask(&a, Action::Publish, "live/cam", &creds, "10.0.0.1"),
        Err(Denial::NoCredentials)
    );
}
