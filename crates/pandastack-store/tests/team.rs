//! Members and the audit log on both backends: a key for a member carries its role (read with
//! the key, so a role change applies at once), a key for a member that is not there is never
//! written, removing a member revokes its keys, the last owner stays even when two replicas
//! race to demote two owners; audit rows page newest first, filter, stay in their workspace
//! and are pruned by age.

mod common;

use pandastack_store::{AuditFilter, AuditRow, KeyGrant, MemberError, StoreError};

fn audit(ws: &str, at: i64, key: &str, action: &str, resource: Option<&str>) -> AuditRow {
    AuditRow {
        id: AuditRow::new_id(at),
        workspace_id: ws.into(),
        at,
        key_id: key.into(),
        key_name: "k".into(),
        member_id: None,
        action: action.into(),
        method: "POST".into(),
        route: "/v1/sandboxes".into(),
        resource_kind: "sandboxes".into(),
        resource_id: resource.map(str::to_owned),
        status: 201,
        error_code: None,
        source: "192.0.2.1".into(),
        request_id: "req_1".into(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn members_roles_and_their_keys() {
    for c in common::stores().await {
        let b = c.backend;
        let (ws, _, _) = c
            .store
            .keys()
            .create_workspace_with_key("w", 10, 60)
            .await
            .unwrap();
        let members = c.store.members();
        let a = members
            .create(&ws.id, "A", "a@x.org", "owner")
            .await
            .unwrap();
        let dup = members.create(&ws.id, "A2", "a@x.org", "viewer").await;
        assert!(matches!(dup, Err(MemberError::EmailTaken)), "{b}");

        let grant = KeyGrant {
            member_id: Some(a.id.clone()),
            ..KeyGrant::default()
        };
        let (key, secret) = c
            .store
            .keys()
            .create_granted(&ws.id, "a's", &grant)
            .await
            .unwrap();
        assert_eq!(key.role.as_deref(), Some("owner"), "{b}");
        let none = KeyGrant {
            member_id: Some("mem-gone".into()),
            ..KeyGrant::default()
        };
        assert!(
            matches!(
                c.store.keys().create_granted(&ws.id, "x", &none).await,
                Err(StoreError::NotFound)
            ),
            "{b}"
        );

        // The last owner stays; two replicas demoting two owners at once leave one.
        let o2 = members
            .create(&ws.id, "B", "b@x.org", "owner")
            .await
            .unwrap();
        assert!(matches!(
            members.update(&ws.id, &a.id, None, Some("viewer")).await,
            Ok(m) if m.role == "viewer"
        ));
        assert!(matches!(
            members.update(&ws.id, &o2.id, None, Some("admin")).await,
            Err(MemberError::LastOwner)
        ));
        members
            .update(&ws.id, &a.id, None, Some("owner"))
            .await
            .unwrap();
        let (m1, m2) = (c.store.members(), c.other.members());
        let (x, y) = tokio::join!(
            m1.update(&ws.id, &a.id, None, Some("admin")),
            m2.update(&ws.id, &o2.id, None, Some("admin")),
        );
        let passed = [x.is_ok(), y.is_ok()].iter().filter(|ok| **ok).count();
        assert_eq!(passed, 1, "{b}: {x:?} {y:?}");
        let owners = members
            .list(&ws.id)
            .await
            .unwrap()
            .iter()
            .filter(|m| m.role == "owner")
            .count();
        assert_eq!(owners, 1, "{b}");

        // The key reads its member's role as it is now; removing the member revokes it.
        let now = c.store.keys().verify(&secret).await.unwrap().unwrap();
        let role_now = members.get(&ws.id, &a.id).await.unwrap().role;
        assert_eq!(now.role.as_deref(), Some(role_now.as_str()), "{b}");
        let (victim, keep) = if role_now == "owner" {
            (&o2, &a)
        } else {
            (&a, &o2)
        };
        members.delete(&ws.id, &victim.id).await.unwrap();
        if victim.id == a.id {
            assert!(
                c.store.keys().verify(&secret).await.unwrap().is_none(),
                "{b}"
            );
        }
        assert!(matches!(
            members.get(&ws.id, &victim.id).await,
            Err(MemberError::NotFound)
        ));
        assert!(matches!(
            members.delete(&ws.id, &keep.id).await,
            Err(MemberError::LastOwner)
        ));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn audit_rows_page_filter_and_age_out() {
    for c in common::stores().await {
        let b = c.backend;
        let rows: Vec<AuditRow> = (0..5)
            .map(|i| {
                audit(
                    "ws-a",
                    1_000 + i,
                    if i % 2 == 0 { "key-even" } else { "key-odd" },
                    if i < 3 {
                        "create_sandbox"
                    } else {
                        "delete_sandbox"
                    },
                    Some(&format!("sb-{i}")),
                )
            })
            .chain([audit("ws-b", 1_002, "key-b", "create_sandbox", None)])
            .collect();
        c.store.audit().insert_many(&rows).await.unwrap();
        let audit = c.store.audit();
        let all = audit
            .list("ws-a", &AuditFilter::default(), 100)
            .await
            .unwrap();
        let ats: Vec<i64> = all.iter().map(|r| r.at).collect();
        assert_eq!(ats, [1_004, 1_003, 1_002, 1_001, 1_000], "{b}");
        assert_eq!(all[0], rows[4], "{b}");
        let page2 = audit
            .list(
                "ws-a",
                &AuditFilter {
                    before: Some(all[1].id.clone()),
                    ..Default::default()
                },
                2,
            )
            .await
            .unwrap();
        assert_eq!(page2, all[2..4].to_vec(), "{b}");
        let odd = AuditFilter {
            key_id: Some("key-odd".into()),
            ..Default::default()
        };
        assert_eq!(audit.list("ws-a", &odd, 100).await.unwrap().len(), 2, "{b}");
        let deletes = AuditFilter {
            action: Some("delete_sandbox".into()),
            since: Some(1_004),
            ..Default::default()
        };
        assert_eq!(
            audit.list("ws-a", &deletes, 100).await.unwrap().len(),
            1,
            "{b}"
        );
        let one = AuditFilter {
            resource_id: Some("sb-2".into()),
            ..Default::default()
        };
        assert_eq!(
            audit.list("ws-a", &one, 100).await.unwrap()[0],
            rows[2],
            "{b}"
        );
        assert_eq!(
            audit
                .list("ws-b", &AuditFilter::default(), 100)
                .await
                .unwrap()
                .len(),
            1
        );
        assert_eq!(audit.prune(1_003).await.unwrap(), 4, "{b}");
        assert_eq!(
            audit
                .list("ws-a", &AuditFilter::default(), 100)
                .await
                .unwrap()
                .len(),
            2
        );
    }
}
