-- The world's state as of a day, per entity class, from `<world>_truth.events` only.
--
-- Written from docs/rules.md ("Which class owns which fact", "Spend", "Gold"), docs/tasks.md
-- and the payload schemas of churn_assets/world/events.py; not from the fold or the Python gold.
--
-- Every fragment is a named SELECT that becomes a CTE of the same name. A fragment with a `class:` line
-- reads the ledger itself and is the only place its class's served day `{day}` enters: it keeps the
-- events of the kinds that class owns with `at <= {day}` (an event of day d is in the state as of d).
-- Every other fragment is built on those, so a state composed for a vintage map takes each fact from its
-- owning class's day, and the classes a query reads are exactly the event fragments it pulls in.
--
-- A reference across classes is a join, and an entity a class does not know at its day has no row there:
-- an inner join drops the reference (a holder unknown to `user_status` is nobody's active user), a left
-- join leaves it NULL (a license whose holder has no known cost center is unallocated).
--
-- Placeholders: {events} the truth table, {day} the class's served day, {anchor} the question's day T,
-- {first} the first day of the question's window (T - N + 1). Windows end at {anchor} under every vintage.
-- "Latest" is the last recorded event by `seq` (ledger order), never the latest date.

-- =====================================================================================================
-- ledger events per owning class
-- =====================================================================================================

-- name: user_status_events
-- class: user_status
SELECT seq, at, kind, entity_id, payload FROM {events}
WHERE kind IN ('user_hired', 'user_offboarded') AND at <= {day}

-- name: cost_center_membership_events
-- class: cost_center_membership
SELECT seq, at, kind, entity_id, payload FROM {events}
WHERE kind IN ('cost_center_created', 'user_hired', 'user_moved_cost_center') AND at <= {day}

-- name: assignments_events
-- class: assignments
SELECT seq, at, kind, entity_id, payload FROM {events}
WHERE kind IN ('license_purchased', 'license_assigned', 'license_unassigned', 'license_reassigned')
  AND at <= {day}

-- name: prices_events
-- class: prices
SELECT seq, at, kind, entity_id, payload FROM {events}
WHERE kind IN ('product_listed', 'price_changed') AND at <= {day}

-- name: contract_terms_events
-- class: contract_terms
SELECT seq, at, kind, entity_id, payload FROM {events}
WHERE kind IN ('contract_signed', 'contract_renewed', 'contract_expired') AND at <= {day}

-- name: vendor_dims_events
-- class: vendor_dims
SELECT seq, at, kind, entity_id, payload FROM {events}
WHERE kind IN ('vendor_registered', 'vendor_changed') AND at <= {day}

-- name: consumption_events
-- class: consumption
SELECT seq, at, kind, entity_id, payload FROM {events}
WHERE kind = 'consumption_logged' AND at <= {day}

-- Utilization is consumption seen per license (docs/tasks.md: a license is used in a window when the
-- window has a consumption record on that license); it has its own served day.
-- name: utilization_events
-- class: utilization
SELECT seq, at, kind, entity_id, payload FROM {events}
WHERE kind = 'consumption_logged' AND at <= {day}

-- name: tickets_events
-- class: tickets
SELECT seq, at, kind, entity_id, payload FROM {events}
WHERE kind IN ('ticket_opened', 'ticket_status_changed', 'ticket_resolved') AND at <= {day}

-- =====================================================================================================
-- one class each
-- =====================================================================================================

-- Users user_status knows: hired on or before its day; active when their last status event is a hire.
-- name: users
SELECT DISTINCT ON (entity_id) entity_id AS user_id, kind = 'user_hired' AS active,
       max(at) FILTER (WHERE kind = 'user_hired') OVER (PARTITION BY entity_id) AS hired_on,
       CASE WHEN kind = 'user_offboarded' THEN at END AS offboarded_on,
       CASE WHEN kind = 'user_offboarded' THEN payload ->> 'reason' END AS offboard_reason
FROM user_status_events
ORDER BY entity_id, seq DESC

-- name: active_users
SELECT user_id FROM users WHERE active

-- name: cost_centers
SELECT entity_id AS cost_center_id, payload ->> 'business_unit' AS business_unit
FROM cost_center_membership_events
WHERE kind = 'cost_center_created'

-- A user's cost center: the one named by their last hire or move (offboarding does not clear it).
-- name: memberships
SELECT DISTINCT ON (entity_id) entity_id AS user_id,
       CASE kind WHEN 'user_hired' THEN payload ->> 'cost_center_id'
                 ELSE payload ->> 'to_cost_center_id' END AS cost_center_id
FROM cost_center_membership_events
WHERE kind IN ('user_hired', 'user_moved_cost_center')
ORDER BY entity_id, seq DESC

-- A license's current holding began with its last holding event (`since`; a freed license has none).
-- name: holdings
SELECT DISTINCT ON (entity_id) entity_id AS license_id,
       CASE kind WHEN 'license_assigned' THEN payload ->> 'user_id'
                 WHEN 'license_reassigned' THEN payload ->> 'to_user_id' END AS holder,
       CASE WHEN kind <> 'license_unassigned' THEN at END AS since
FROM assignments_events
WHERE kind IN ('license_assigned', 'license_unassigned', 'license_reassigned')
ORDER BY entity_id, seq DESC

-- Every license purchased by the class's day, with its holder then (NULL: nobody holds it).
-- name: licenses
SELECT p.entity_id AS license_id, p.payload ->> 'product_id' AS product_id,
       p.payload ->> 'contract_id' AS contract_id, p.at AS purchased_on,
       (p.payload ->> 'unit_price_usd')::numeric AS unit_price, h.holder, h.since
FROM assignments_events p
LEFT JOIN holdings h ON h.license_id = p.entity_id
WHERE p.kind = 'license_purchased'

-- A product's list price is that of its listing or its last price change (monthly, per seat).
-- name: products
SELECT l.entity_id AS product_id, l.payload ->> 'vendor_id' AS vendor_id, lp.list_price, lp.price_since,
       l.payload ->> 'name' AS name, l.payload ->> 'license_model' AS license_model
FROM prices_events l
JOIN (SELECT DISTINCT ON (entity_id) entity_id, (payload ->> 'list_price_usd')::numeric AS list_price,
             at AS price_since
      FROM prices_events
      WHERE kind IN ('product_listed', 'price_changed')
      ORDER BY entity_id, seq DESC) lp ON lp.entity_id = l.entity_id
WHERE l.kind = 'product_listed'

-- name: vendors
SELECT DISTINCT ON (entity_id) entity_id AS vendor_id, payload ->> 'name' AS name, payload ->> 'tier' AS tier
FROM vendor_dims_events
WHERE kind IN ('vendor_registered', 'vendor_changed')
ORDER BY entity_id, seq DESC

-- Every recorded term of a contract: the signed one and each renewal.
-- name: terms
SELECT entity_id AS contract_id, seq,
       (payload ->> 'effective_on')::date AS effective_on, (payload ->> 'expires_on')::date AS expires_on,
       (payload ->> 'annual_value_usd')::numeric AS annual_value, (payload ->> 'committed_seats')::int AS seats
FROM contract_terms_events
WHERE kind IN ('contract_signed', 'contract_renewed')

-- One row per contract the class knows: vendor and notice period (from its signing), its latest recorded
-- term, its last day (the latest expiry of its terms) and whether one of its terms covers today. A
-- contract's status is derived here, at the anchor, from the served dates, never read from an event.
-- name: contracts
SELECT s.entity_id AS contract_id, s.payload ->> 'vendor_id' AS vendor_id,
       (s.payload ->> 'renewal_notice_days')::int AS notice_days,
       latest.expires_on AS latest_expires_on, latest.annual_value, latest.seats,
       span.last_day, span.active_today,
       CASE WHEN span.active_today THEN 'active'
            WHEN {anchor} > span.last_day THEN 'expired'
            ELSE 'pending' END AS status
FROM contract_terms_events s
JOIN (SELECT DISTINCT ON (contract_id) contract_id, expires_on, annual_value, seats
      FROM terms ORDER BY contract_id, seq DESC) latest ON latest.contract_id = s.entity_id
JOIN (SELECT contract_id, max(expires_on) AS last_day,
             bool_or(effective_on <= {anchor} AND {anchor} <= expires_on) AS active_today
      FROM terms GROUP BY contract_id) span ON span.contract_id = s.entity_id
WHERE s.kind = 'contract_signed'

-- Consumption records inside the question's window (as far as the class's day reaches).
-- name: consumption_window
SELECT entity_id AS license_id, payload ->> 'user_id' AS user_id, payload ->> 'product_id' AS product_id,
       (payload ->> 'api_calls')::bigint AS api_calls, (payload ->> 'session_minutes')::bigint AS minutes
FROM consumption_events
WHERE at BETWEEN {first} AND {anchor}

-- Usage per license in the window (utilization): licenses without a record have no row.
-- name: usage_window
SELECT entity_id AS license_id, count(*) AS records, sum((payload ->> 'api_calls')::bigint) AS api_calls
FROM utilization_events
WHERE at BETWEEN {first} AND {anchor}
GROUP BY entity_id

-- A ticket's status is its last status event's; `updated_on` that event's day.
-- name: tickets
SELECT o.entity_id AS ticket_id, o.at AS opened_on, o.payload ->> 'user_id' AS user_id,
       o.payload ->> 'product_id' AS product_id, o.payload ->> 'priority' AS priority, s.status,
       s.at AS updated_on, CASE WHEN s.status = 'resolved' THEN s.at END AS resolved_on
FROM tickets_events o
JOIN (SELECT DISTINCT ON (entity_id) entity_id, payload ->> 'status' AS status, at
      FROM tickets_events ORDER BY entity_id, seq DESC) s ON s.entity_id = o.entity_id
WHERE o.kind = 'ticket_opened'

-- =====================================================================================================
-- across classes
-- =====================================================================================================

-- Licenses held by active users (assignments x user_status): a holder user_status does not know is absent.
-- name: held_by_active
SELECT l.license_id, l.product_id, l.contract_id, l.holder, l.since
FROM licenses l
JOIN active_users u ON u.user_id = l.holder

-- Spend (docs/rules.md, "Spend"): a license held by an active user whose cost center is known is allocated to that
-- cost center at its product's list price; every other license is unallocated. One row per license known
-- to assignments whose product prices knows (a price the served prices do not know is no price at all).
-- name: license_spend
SELECT l.license_id, p.list_price, m.cost_center_id
FROM licenses l
JOIN products p ON p.product_id = l.product_id
LEFT JOIN active_users u ON u.user_id = l.holder
LEFT JOIN memberships m ON m.user_id = u.user_id

-- Monthly spend of every cost center the class knows (zero when nothing is allocated to it).
-- name: cost_center_spend
SELECT c.cost_center_id, c.business_unit, coalesce(sum(s.list_price), 0) AS spend
FROM cost_centers c
LEFT JOIN license_spend s ON s.cost_center_id = c.cost_center_id
GROUP BY c.cost_center_id, c.business_unit
