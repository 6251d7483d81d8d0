-- What each store built by the fold should hold as of a day, from the truth schema only (the store-parity
-- checks of churn_assets/orchestration/assets/ compare it with the store). Every class is served as of the
-- store's day {anchor}; {first} starts a trailing window that ends on it. Written from the stores' documented
-- content (fabric/operational.py, saas_mock/app.py, contracts/model.py, grounding/rag_corpus.py docstrings and
-- the documents they hold), over the class states of states.sql, never from the fold.

-- ---------------------------------------------------------------------------------------------------
-- people, licenses, products, vendors, tickets (operational store, SaaS API, RAG corpus)
-- ---------------------------------------------------------------------------------------------------

-- store: user_facts
SELECT u.user_id, u.active, u.hired_on, u.offboarded_on, u.offboard_reason, m.cost_center_id,
       mv.since AS cost_center_since
FROM users u
LEFT JOIN memberships m ON m.user_id = u.user_id
LEFT JOIN (SELECT DISTINCT ON (entity_id) entity_id, at AS since FROM cost_center_membership_events
           WHERE kind IN ('user_hired', 'user_moved_cost_center') ORDER BY entity_id, seq DESC) mv
       ON mv.entity_id = u.user_id
ORDER BY u.user_id

-- store: license_facts
SELECT l.license_id, l.product_id, p.vendor_id, l.contract_id, l.purchased_on, l.unit_price, l.holder, l.since,
       (a.user_id IS NOT NULL) AS holder_active
FROM licenses l
LEFT JOIN products p ON p.product_id = l.product_id
LEFT JOIN active_users a ON a.user_id = l.holder
ORDER BY l.license_id

-- An active user's entitlements: the products of the licenses they hold, since their earliest holding.
-- store: entitlement_facts
SELECT h.holder AS user_id, h.product_id, p.name AS product_name,
       array_agg(h.license_id ORDER BY h.license_id) AS license_ids, min(h.since) AS since
FROM held_by_active h
LEFT JOIN products p ON p.product_id = h.product_id
GROUP BY h.holder, h.product_id, p.name
ORDER BY h.holder, h.product_id

-- store: entitlement_lines
SELECT h.holder AS user_id, h.product_id, p.name AS product_name, h.license_id, h.since
FROM held_by_active h
LEFT JOIN products p ON p.product_id = h.product_id
ORDER BY h.holder, h.product_id, h.license_id

-- store: ticket_facts
SELECT ticket_id, user_id, product_id, priority, status, opened_on, updated_on, resolved_on
FROM tickets ORDER BY ticket_id

-- store: product_facts
SELECT p.product_id, p.name, p.vendor_id, p.license_model, p.list_price, p.price_since,
       prev.list_price AS previous_price
FROM products p
LEFT JOIN (SELECT DISTINCT ON (entity_id) entity_id, (payload ->> 'list_price_usd')::numeric AS list_price
           FROM (SELECT *, row_number() OVER (PARTITION BY entity_id ORDER BY seq DESC) AS back
                 FROM prices_events) e
           WHERE back = 2 ORDER BY entity_id) prev ON prev.entity_id = p.product_id
ORDER BY p.product_id

-- store: vendor_facts
SELECT v.vendor_id, v.name, v.tier, r.at AS registered_on
FROM vendors v
JOIN vendor_dims_events r ON r.entity_id = v.vendor_id AND r.kind = 'vendor_registered'
ORDER BY v.vendor_id

-- store: cost_center_facts
SELECT e.entity_id AS cost_center_id, e.payload ->> 'name' AS name, e.payload ->> 'business_unit' AS business_unit
FROM cost_center_membership_events e
WHERE e.kind = 'cost_center_created'
ORDER BY 1

-- Consumption on each license known to assignments, over the trailing window, and its last day of use.
-- store: license_usage
SELECT l.license_id, l.product_id, l.holder, (a.user_id IS NOT NULL) AS holder_active,
       count(DISTINCT u.at) FILTER (WHERE u.at >= {first}) AS active_days,
       coalesce(sum((u.payload ->> 'sessions')::bigint) FILTER (WHERE u.at >= {first}), 0) AS sessions,
       coalesce(sum((u.payload ->> 'session_minutes')::bigint) FILTER (WHERE u.at >= {first}), 0) AS minutes,
       coalesce(sum((u.payload ->> 'api_calls')::bigint) FILTER (WHERE u.at >= {first}), 0) AS api_calls,
       max(u.at) AS last_used_on
FROM licenses l
LEFT JOIN active_users a ON a.user_id = l.holder
LEFT JOIN utilization_events u ON u.entity_id = l.license_id
GROUP BY l.license_id, l.product_id, l.holder, a.user_id
ORDER BY l.license_id

-- A product's consumption over the trailing window, by the product its records name (the `consumption`
-- class, every record on any license).
-- store: product_usage
SELECT p.product_id, count(DISTINCT c.payload ->> 'user_id') AS active_users,
       coalesce(sum((c.payload ->> 'sessions')::bigint), 0) AS sessions,
       coalesce(sum((c.payload ->> 'session_minutes')::bigint), 0) AS minutes,
       coalesce(sum((c.payload ->> 'api_calls')::bigint), 0) AS api_calls
FROM products p
LEFT JOIN consumption_events c ON c.payload ->> 'product_id' = p.product_id AND c.at >= {first}
GROUP BY p.product_id
ORDER BY p.product_id

-- Usage per (user, product) pair ever used by the day, over three trailing windows ending on it (the RAG
-- corpus's consumption records).
-- store: pair_usage
SELECT payload ->> 'user_id' AS user_id, payload ->> 'product_id' AS product_id, max(at) AS last_used_on,
       count(*) FILTER (WHERE at > {anchor} - 7) AS records_7,
       sum((payload ->> 'sessions')::bigint) FILTER (WHERE at > {anchor} - 7) AS sessions_7,
       sum((payload ->> 'session_minutes')::bigint) FILTER (WHERE at > {anchor} - 7) AS minutes_7,
       sum((payload ->> 'api_calls')::bigint) FILTER (WHERE at > {anchor} - 7) AS api_calls_7,
       count(*) FILTER (WHERE at > {anchor} - 30) AS records_30,
       sum((payload ->> 'sessions')::bigint) FILTER (WHERE at > {anchor} - 30) AS sessions_30,
       sum((payload ->> 'session_minutes')::bigint) FILTER (WHERE at > {anchor} - 30) AS minutes_30,
       sum((payload ->> 'api_calls')::bigint) FILTER (WHERE at > {anchor} - 30) AS api_calls_30,
       count(*) FILTER (WHERE at > {anchor} - 90) AS records_90,
       sum((payload ->> 'sessions')::bigint) FILTER (WHERE at > {anchor} - 90) AS sessions_90,
       sum((payload ->> 'session_minutes')::bigint) FILTER (WHERE at > {anchor} - 90) AS minutes_90,
       sum((payload ->> 'api_calls')::bigint) FILTER (WHERE at > {anchor} - 90) AS api_calls_90
FROM consumption_events
GROUP BY 1, 2
ORDER BY 1, 2

-- The first user hired after the day (a user the store must not know yet), if any.
-- store: next_hire
SELECT entity_id AS user_id FROM {events} WHERE kind = 'user_hired' AND at > {anchor} ORDER BY seq LIMIT 1

-- ---------------------------------------------------------------------------------------------------
-- contracts (the documents)
-- ---------------------------------------------------------------------------------------------------

-- One row per contract the class knows on the day, with its vendor as vendor_dims knows it, the vendor's
-- listed products (prices), the recorded expiry and every term in recorded order as JSON.
-- store: contract_facts
SELECT c.contract_id, c.vendor_id, v.name AS vendor_name, v.tier AS vendor_tier,
       coalesce((SELECT json_agg(json_build_array(p.product_id, p.name) ORDER BY p.product_id)
                 FROM products p WHERE p.vendor_id = c.vendor_id), '[]'::json) AS products,
       (s.payload ->> 'signed_on')::date AS signed_on, (s.payload ->> 'auto_renew')::boolean AS auto_renew,
       c.notice_days, c.status,
       (SELECT max(x.at) FROM contract_terms_events x
        WHERE x.entity_id = c.contract_id AND x.kind = 'contract_expired') AS expired_on,
       (SELECT json_agg(json_build_array(
                  CASE t.kind WHEN 'contract_signed' THEN 'signed' ELSE 'renewed' END, t.at,
                  (t.payload ->> 'term_months')::int, t.payload ->> 'effective_on', t.payload ->> 'expires_on',
                  (t.payload ->> 'annual_value_usd')::numeric, (t.payload ->> 'committed_seats')::int)
                ORDER BY t.seq)
        FROM contract_terms_events t
        WHERE t.entity_id = c.contract_id AND t.kind IN ('contract_signed', 'contract_renewed')) AS terms
FROM contracts c
JOIN contract_terms_events s ON s.entity_id = c.contract_id AND s.kind = 'contract_signed'
LEFT JOIN vendors v ON v.vendor_id = c.vendor_id
ORDER BY c.contract_id
