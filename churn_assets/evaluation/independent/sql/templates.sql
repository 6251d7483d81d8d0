-- One query per template, over the class states of states.sql (each a CTE of the same name).
--
-- Written from each template's question text (churn_assets/tasks/templates.py) and docs/tasks.md. A query
-- returns one row with one column, `answer`, or no row; NULL / no row is "no answer" (an entity the served
-- data does not know). Money and fractions are rounded here (half up at 2 decimals, Postgres `round` on
-- numeric); lists are sorted arrays.
--
-- Placeholders: the task's parameters by name ({product}, {cost_center}, {vendor}, {contract}, {priority},
-- {tier}, {business_unit}, {threshold}), {anchor} = T, {first} = T - days + 1, {horizon} = T + days.
-- A `-- span:` template is written for one day: its answer is the query at the end of {day2} minus the
-- query at the end of {day1}, each run with every class served as of min(that day, its served day).
-- A "top" answer is NULL when the largest amount is tied (the tie rule of every top question).

-- ---------------------------------------------------------------------------------------------------
-- task_tier 1
-- ---------------------------------------------------------------------------------------------------

-- template: t1_list_price
SELECT round(list_price, 2) AS answer FROM products WHERE product_id = {product}

-- template: t1_price_changes
SELECT count(*) AS answer FROM prices_events
WHERE kind = 'price_changed' AND at BETWEEN {first} AND {anchor}

-- template: t1_purchases
SELECT count(*) AS answer FROM assignments_events
WHERE kind = 'license_purchased' AND at BETWEEN {first} AND {anchor}

-- template: t1_reclamations
SELECT count(*) AS answer FROM assignments_events
WHERE kind = 'license_unassigned' AND payload ->> 'reason' = 'reclaimed_idle' AND at BETWEEN {first} AND {anchor}

-- template: t1_freed_by_offboarding
SELECT count(*) AS answer FROM assignments_events
WHERE kind = 'license_unassigned' AND payload ->> 'reason' = 'offboarded' AND at BETWEEN {first} AND {anchor}

-- template: t1_unassigned_licenses
SELECT count(*) AS answer FROM licenses WHERE holder IS NULL

-- template: t1_offboardings
SELECT count(*) AS answer FROM user_status_events
WHERE kind = 'user_offboarded' AND at BETWEEN {first} AND {anchor}

-- template: t1_hires
SELECT count(*) AS answer FROM user_status_events
WHERE kind = 'user_hired' AND at BETWEEN {first} AND {anchor}

-- template: t1_open_tickets_product
SELECT count(*) AS answer FROM tickets WHERE product_id = {product} AND status IN ('open', 'in_progress')

-- template: t1_open_tickets_priority
SELECT count(*) AS answer FROM tickets WHERE priority = {priority} AND status IN ('open', 'in_progress')

-- template: t1_tickets_opened
SELECT count(*) AS answer FROM tickets WHERE opened_on BETWEEN {first} AND {anchor}

-- template: t1_vendor_name
SELECT name AS answer FROM vendors WHERE vendor_id = {vendor}

-- template: t1_vendor_tier
SELECT tier AS answer FROM vendors WHERE vendor_id = {vendor}

-- A direct reassignment is a `license_reassigned` event (holder to holder, never freed in between); the
-- license's product is the one it was purchased for.
-- template: t1_reassignments_product
SELECT count(*) AS answer
FROM assignments_events r
JOIN licenses l ON l.license_id = r.entity_id
WHERE r.kind = 'license_reassigned' AND r.at BETWEEN {first} AND {anchor} AND l.product_id = {product}

-- template: t1_held_licenses_change
-- span: true
SELECT count(*) AS answer FROM licenses WHERE holder IS NOT NULL

-- template: t1_api_calls_product
SELECT coalesce(sum(api_calls), 0) AS answer FROM consumption_window WHERE product_id = {product}

-- template: t1_distinct_users_product
SELECT count(DISTINCT user_id) AS answer FROM consumption_window WHERE product_id = {product}

-- template: t1_session_minutes_product
SELECT coalesce(sum(minutes), 0) AS answer FROM consumption_window WHERE product_id = {product}

-- template: t1_top_product_minutes
SELECT CASE WHEN count(*) = 1 OR max(amount) FILTER (WHERE rank = 1) > max(amount) FILTER (WHERE rank = 2)
            THEN max(product_id) FILTER (WHERE rank = 1) END AS answer
FROM (SELECT product_id, sum(minutes) AS amount, row_number() OVER (ORDER BY sum(minutes) DESC) AS rank
      FROM consumption_window GROUP BY product_id) ranked
HAVING count(*) > 0

-- ---------------------------------------------------------------------------------------------------
-- task_tier 2
-- ---------------------------------------------------------------------------------------------------

-- template: t2_cost_center_spend
SELECT round(spend, 2) AS answer FROM cost_center_spend WHERE cost_center_id = {cost_center}

-- A total counts every license once, allocated or not (licenses and prices only).
-- template: t2_total_spend
SELECT round(coalesce(sum(p.list_price), 0), 2) AS answer
FROM licenses l JOIN products p ON p.product_id = l.product_id

-- template: t2_vendor_spend
SELECT round(coalesce(sum(p.list_price), 0), 2) AS answer
FROM licenses l JOIN products p ON p.product_id = l.product_id
WHERE p.vendor_id = {vendor}

-- template: t2_top_cost_center
SELECT CASE WHEN count(*) = 1 OR max(spend) FILTER (WHERE rank = 1) > max(spend) FILTER (WHERE rank = 2)
            THEN max(cost_center_id) FILTER (WHERE rank = 1) END AS answer
FROM (SELECT cost_center_id, spend, row_number() OVER (ORDER BY spend DESC) AS rank
      FROM cost_center_spend) ranked
HAVING count(*) > 0

-- template: t2_top_cost_center_in_unit
SELECT CASE WHEN count(*) = 1 OR max(spend) FILTER (WHERE rank = 1) > max(spend) FILTER (WHERE rank = 2)
            THEN max(cost_center_id) FILTER (WHERE rank = 1) END AS answer
FROM (SELECT cost_center_id, spend, row_number() OVER (ORDER BY spend DESC) AS rank
      FROM cost_center_spend WHERE business_unit = {business_unit}) ranked
HAVING count(*) > 0

-- "Above" is strictly greater than the threshold (whole dollars).
-- template: t2_cost_centers_above
SELECT coalesce(array_agg(cost_center_id ORDER BY cost_center_id), ARRAY[]::text[]) AS answer
FROM cost_center_spend WHERE spend > {threshold}

-- template: t2_spend_change_cost_center
-- span: true
SELECT round(spend, 2) AS answer FROM cost_center_spend WHERE cost_center_id = {cost_center}

-- Unallocated: every license whose spend no cost center carries (unassigned, held by an inactive or unknown
-- user, or by a user without a known cost center).
-- template: t2_unallocated_spend
SELECT round(coalesce(sum(list_price), 0), 2) AS answer FROM license_spend WHERE cost_center_id IS NULL

-- template: t2_idle_licenses_cost_center
SELECT CASE WHEN EXISTS (SELECT 1 FROM cost_centers WHERE cost_center_id = {cost_center}) THEN (
         SELECT count(*) FROM held_by_active h
         JOIN memberships m ON m.user_id = h.holder
         WHERE m.cost_center_id = {cost_center}
           AND NOT EXISTS (SELECT 1 FROM usage_window w WHERE w.license_id = h.license_id)) END AS answer

-- template: t2_idle_license_cost
SELECT round(coalesce(sum(p.list_price), 0), 2) AS answer
FROM held_by_active h
JOIN products p ON p.product_id = h.product_id
WHERE NOT EXISTS (SELECT 1 FROM usage_window w WHERE w.license_id = h.license_id)

-- template: t2_unused_licenses_product
SELECT count(*) AS answer FROM held_by_active h
WHERE h.product_id = {product}
  AND NOT EXISTS (SELECT 1 FROM usage_window w WHERE w.license_id = h.license_id)

-- A license with no record in the window made zero calls too.
-- template: t2_zero_api_licenses_product
SELECT count(*) AS answer FROM held_by_active h
LEFT JOIN usage_window w ON w.license_id = h.license_id
WHERE h.product_id = {product} AND coalesce(w.api_calls, 0) = 0

-- template: t2_active_users_cost_center
SELECT CASE WHEN EXISTS (SELECT 1 FROM cost_centers WHERE cost_center_id = {cost_center}) THEN (
         SELECT count(*) FROM active_users u JOIN memberships m ON m.user_id = u.user_id
         WHERE m.cost_center_id = {cost_center}) END AS answer

-- template: t2_active_users_change_cost_center
-- span: true
SELECT CASE WHEN EXISTS (SELECT 1 FROM cost_centers WHERE cost_center_id = {cost_center}) THEN (
         SELECT count(*) FROM active_users u JOIN memberships m ON m.user_id = u.user_id
         WHERE m.cost_center_id = {cost_center}) END AS answer

-- The opener's cost center is their recorded one today (offboarded users keep their last one).
-- template: t2_tickets_opened_cost_center
SELECT CASE WHEN EXISTS (SELECT 1 FROM cost_centers WHERE cost_center_id = {cost_center}) THEN (
         SELECT count(*) FROM tickets t JOIN memberships m ON m.user_id = t.user_id
         WHERE m.cost_center_id = {cost_center} AND t.opened_on BETWEEN {first} AND {anchor}) END AS answer

-- A product's vendor is a fact of its listing (prices).
-- template: t2_tickets_opened_vendor
SELECT count(*) AS answer FROM tickets t JOIN products p ON p.product_id = t.product_id
WHERE p.vendor_id = {vendor} AND t.opened_on BETWEEN {first} AND {anchor}

-- No answer without a seat to use (a fraction of zero licenses).
-- template: t2_seat_utilization
SELECT round(count(w.license_id)::numeric / nullif(count(*), 0), 2) AS answer
FROM held_by_active h
LEFT JOIN usage_window w ON w.license_id = h.license_id
WHERE h.product_id = {product}

-- template: t2_license_holders_product
SELECT count(*) AS answer FROM held_by_active WHERE product_id = {product}

-- ---------------------------------------------------------------------------------------------------
-- task_tier 3 (contract terms)
-- ---------------------------------------------------------------------------------------------------

-- template: t3_contract_annual_value
SELECT round(annual_value, 2) AS answer FROM contracts WHERE contract_id = {contract}

-- template: t3_vendor_contract_value
SELECT round(coalesce(sum(annual_value), 0), 2) AS answer FROM contracts
WHERE vendor_id = {vendor} AND active_today

-- template: t3_committed_seat_gap
SELECT c.seats - (SELECT count(*) FROM held_by_active h WHERE h.contract_id = c.contract_id) AS answer
FROM contracts c WHERE c.contract_id = {contract}

-- The last day of the latest term minus the notice period agreed at signing.
-- template: t3_notice_deadline
SELECT latest_expires_on - notice_days AS answer FROM contracts WHERE contract_id = {contract}

-- template: t3_committed_seats
SELECT seats AS answer FROM contracts WHERE contract_id = {contract}

-- template: t3_contract_status
SELECT status AS answer FROM contracts WHERE contract_id = {contract}

-- The largest m with T + m calendar months on or before the last day (Postgres clamps a month-end day:
-- 2024-01-31 + 1 month = 2024-02-29); 0 when the last day is before T.
-- template: t3_months_remaining
SELECT coalesce((SELECT max(m) FROM generate_series(0, 1200) AS m
                 WHERE ({anchor} + make_interval(months => m))::date <= c.last_day), 0) AS answer
FROM contracts c WHERE c.contract_id = {contract}

-- template: t3_contract_vendor_name
SELECT v.name AS answer FROM contracts c JOIN vendors v ON v.vendor_id = c.vendor_id
WHERE c.contract_id = {contract}

-- template: t3_contracts_expiring
SELECT coalesce(array_agg(contract_id ORDER BY contract_id), ARRAY[]::text[]) AS answer FROM contracts
WHERE active_today AND last_day BETWEEN {anchor} AND {horizon}

-- A contract whose vendor vendor_dims does not know has no current tier.
-- template: t3_contracts_by_vendor_tier
SELECT coalesce(array_agg(c.contract_id ORDER BY c.contract_id), ARRAY[]::text[]) AS answer
FROM contracts c JOIN vendors v ON v.vendor_id = c.vendor_id
WHERE c.active_today AND v.tier = {tier}
