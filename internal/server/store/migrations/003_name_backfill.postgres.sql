UPDATE objects SET name = COALESCE(data::json->>'name', '') WHERE kind = 'loadbalancer'
