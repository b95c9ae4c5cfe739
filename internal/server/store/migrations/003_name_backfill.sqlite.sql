UPDATE objects SET name = COALESCE(json_extract(data, '$.name'), '') WHERE kind = 'loadbalancer'
